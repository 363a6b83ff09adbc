# Sourced by the conformance fixtures' regenerate.sh scripts: where the reference Data-Juicer lives
# and how its runs are kept hermetic.
#
#   DJ_VENV       its own venv (default /work/djvenv), so that our package never imports it
#   dj_venv_ready creates that venv with py-data-juicer 1.6.1 when it is missing or lacks Data-Juicer,
#                 checks the version, and keeps Data-Juicer offline (Hugging Face caches in a temp dir)
DJ_VENV="${DJ_VENV:-/work/djvenv}"

dj_venv_ready() {
    if [ ! -x "$DJ_VENV/bin/python" ] || ! "$DJ_VENV/bin/python" -c "import data_juicer" 2>/dev/null; then
        echo "creating Data-Juicer venv in $DJ_VENV" >&2
        python3 -m venv "$DJ_VENV"
        "$DJ_VENV/bin/pip" install "py-data-juicer==1.6.1" aiohttp
    fi
    local version
    version="$("$DJ_VENV/bin/python" -c 'import data_juicer; print(data_juicer.__version__)')"
    case "$version" in
        1.6.1*) ;;
        *) echo "expected data_juicer 1.6.1 in $DJ_VENV, found $version" >&2; return 1 ;;
    esac
    export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
    export HF_HOME="${HF_HOME:-$(mktemp -d)}"
}
