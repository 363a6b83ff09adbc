"""Deterministic input corpora for the shipped-recipe suite, one per kind of text.

Why generate instead of download: nothing may be fetched at run time, and the
recipes need real text of their kind to exercise their filters.  The text
comes from what every machine of this kind carries (Python's own language
reference in ``pydoc_data.topics``, the standard library's source, C headers
in /usr/include, the message catalogs in /usr/share/locale), mixed with
planted faults each recipe is meant to catch: e-mails and links, mojibake,
odd whitespace and punctuation, repeated text, symbol soup, flagged words,
other languages, exact and near duplicates, LaTeX without a section.

Run once (``python -m tests.dj_recipes.corpus``); the JSONL files it writes
under ``inputs/`` are committed, so the tests never depend on this machine's
files (another Python version has another language reference).
"""

from __future__ import annotations

import gettext
import glob
import json
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
INPUTS = os.path.join(HERE, "inputs")

#: Words the fixture word list flags (models/assets/flagged_words.json); planted in some rows.
FLAGGED_EN = ["casino", "viagra", "porn", "xxx", "nude", "gambling", "bitcoin-scam", "escort"]
FLAGGED_ZH = ["赌博", "色情", "毒品", "诈骗", "彩票"]
#: The fixture stopword list (models/assets/stopwords.json).
STOPWORDS_EN = (
    "a about above after again against all am an and any are as at be because been before being below "
    "between both but by can could did do does doing down during each few for from further had has have "
    "having he her here hers him his how i if in into is it its itself just me more most my no nor not of "
    "off on once only or other our out over own same she should so some such than that the their them then "
    "there these they this those through to too under until up very was we were what when where which while "
    "who whom why will with would you your"
).split()


# --------------------------------------------------------------------------- sources
def reference_paragraphs() -> list[tuple[str, str]]:
    """(topic, paragraph) from Python's language reference, prose paragraphs only."""
    import pydoc_data.topics as topics

    out = []
    for name in sorted(topics.topics):
        for para in re.split(r"\n\s*\n", topics.topics[name]):
            para = para.strip("\n")
            if not para.strip() or para.lstrip() != para or set(para.strip()) <= set("*=-"):
                continue  # code blocks (indented) and heading rules
            words = para.split()
            if len(words) >= 8:
                out.append((name, " ".join(para.split("\n"))))
    return out


def reference_code_blocks() -> list[str]:
    import pydoc_data.topics as topics

    blocks = []
    for name in sorted(topics.topics):
        for para in re.split(r"\n\s*\n", topics.topics[name]):
            if para.startswith("   ") and len(para) > 40:
                blocks.append("\n".join(line[3:] for line in para.split("\n")))
    return blocks


def catalog_pairs(lang: str, limit_files: int = 40) -> list[tuple[str, str]]:
    """(English msgid, translated msgstr) pairs from the machine's gettext catalogs."""
    pairs = []
    for path in sorted(glob.glob(f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo"))[:limit_files]:
        try:
            with open(path, "rb") as fh:
                catalog = gettext.GNUTranslations(fh)._catalog
        except Exception:  # noqa: BLE001 - a broken catalog is skipped
            continue
        for key in sorted(k for k in catalog if isinstance(k, str)):
            value = catalog[key]
            if key and isinstance(value, str) and 20 <= len(key) <= 300 and value.strip():
                pairs.append((" ".join(key.split()), " ".join(value.split())))
    return pairs


# --------------------------------------------------------------------------- faults
MOJIBAKE = ["cafÃ©", "naÃ¯ve", "â€œquotedâ€\x9d", "donâ€™t", "rÃ©sumÃ©"]
ODD_SPACE = ["\u3000", "\xa0", "\u2003", "\t", "\u200b"]
ODD_PUNCT = ["，", "。", "！", "？", "：", "；", "（", "）", "【", "】", "「", "」", "～"]


def plant(rng: random.Random, text: str, kind: str) -> str:
    words = text.split(" ")
    pos = rng.randrange(len(words) + 1)
    if kind == "email":
        insert = f"Write to {rng.choice(['ana', 'li.wei', 'j.smith', 'ops-team'])}@{rng.choice(['example.org', 'mail.example.com', 'uni.example.edu'])} for details."
    elif kind == "link":
        insert = rng.choice(
            [
                "See https://docs.example.org/reference/expressions.html#calls.",
                "Mirror: http://www.example.com/pub/python/3.11/",
                "(source: www.example.net/archive/2019/05/)",
                '<a href="//cdn.example.com/x.js">script</a>',
            ]
        )
    elif kind == "mojibake":
        insert = rng.choice(MOJIBAKE)
    elif kind == "space":
        insert = rng.choice(ODD_SPACE).join(["odd", "spacing", "here"])
    elif kind == "punct":
        insert = "".join(rng.choice(ODD_PUNCT) for _ in range(3))
    elif kind == "flagged":
        insert = " ".join(rng.choice(FLAGGED_EN) for _ in range(rng.randint(1, 4)))
    elif kind == "longword":
        insert = rng.choice(
            [
                "supercalifragilisticexpialidocious",
                "pneumonoultramicroscopicsilicovolcanoconiosis",
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            ]
        )
    else:
        raise ValueError(kind)
    return " ".join(words[:pos] + [insert] + words[pos:])


def near_duplicate(rng: random.Random, text: str) -> str:
    """A copy differing in punctuation, case or one word: what simhash/lowercase dedup should catch."""
    choice = rng.randrange(3)
    if choice == 0:
        return text.replace(",", ";").replace(".", "!", 1)
    if choice == 1:
        return text.upper()[:1] + text[1:].lower()
    words = text.split(" ")
    i = rng.randrange(len(words))
    words[i] = words[i] + "s"
    return " ".join(words)


def symbol_soup(rng: random.Random) -> str:
    return " ".join(
        "".join(rng.choice("#$%^&*()[]{}<>|~=+-_/\\0123456789") for _ in range(rng.randint(2, 9)))
        for _ in range(rng.randint(20, 80))
    )


def repetitive(rng: random.Random, sentence: str) -> str:
    return " ".join([sentence] * rng.randint(8, 30))


# --------------------------------------------------------------------------- kinds
def _docs_from_paragraphs(rng: random.Random, paras: list[tuple[str, str]], n: int) -> list[tuple[str, str]]:
    """Documents of varied lengths made of consecutive reference paragraphs."""
    docs, i = [], 0
    buckets = [(3, 15, 0.06), (20, 120, 0.42), (120, 350, 0.40), (600, 900, 0.08), (1000, 1300, 0.04)]
    for _ in range(n):
        r, acc = rng.random(), 0.0
        for lo, hi, w in buckets:  # noqa: B007 - the bucket found is read after the break
            acc += w
            if r <= acc:
                break
        target = rng.randint(lo, hi)
        topic, parts, count = paras[i % len(paras)][0], [], 0
        while count < target:
            words = paras[i % len(paras)][1].split()
            take = words[: max(1, target - count)] if count + len(words) > target and lo < 20 else words
            parts.append(" ".join(take))
            count += len(take)
            i += 1
        sep = "\n\n" if rng.random() < 0.6 else " "
        docs.append((topic, sep.join(parts)))
    return docs


def build_prose(seed: int = 7, n: int = 130) -> list[dict]:
    rng = random.Random(seed)
    paras = reference_paragraphs()
    rows = [{"text": t, "source": f"python-reference:{topic}"} for topic, t in _docs_from_paragraphs(rng, paras, n)]
    faults = ["email", "link", "mojibake", "space", "punct", "flagged", "longword"]
    for row in rows:
        if rng.random() < 0.45:
            for _ in range(rng.randint(1, 3)):
                row["text"] = plant(rng, row["text"], rng.choice(faults))
    zh = catalog_pairs("zh_CN")
    de = catalog_pairs("de")
    fr = catalog_pairs("fr")
    extra = []
    for k in range(12):
        extra.append({"text": " ".join(v for _, v in zh[k * 9 : (k + 1) * 9]), "source": "locale:zh_CN"})
        extra.append({"text": " ".join(v for _, v in de[k * 7 : (k + 1) * 7]), "source": "locale:de"})
        extra.append({"text": " ".join(v for _, v in fr[k * 7 : (k + 1) * 7]), "source": "locale:fr"})
    for _ in range(10):
        extra.append({"text": symbol_soup(rng), "source": "planted:symbols"})
        sentence = paras[rng.randrange(len(paras))][1].split(". ")[0]
        extra.append({"text": repetitive(rng, sentence), "source": "planted:repetition"})
    code = reference_code_blocks()
    for k in range(10):
        extra.append({"text": code[k * 13 % len(code)], "source": "python-reference:code"})
    rows.extend(extra)
    rng.shuffle(rows)
    dups = []
    for row in rng.sample(rows, 14):
        dups.append(dict(row, source=row["source"] + ":exact-copy"))
    for row in rng.sample(rows, 14):
        dups.append(dict(row, text=near_duplicate(rng, row["text"]), source=row["source"] + ":near-copy"))
    for d in dups:
        rows.insert(rng.randrange(len(rows) + 1), d)
    return _number(rows)


def build_html(seed: int = 11, n: int = 150) -> list[dict]:
    """Stack Exchange-like posts: HTML questions and answers over reference prose."""
    rng = random.Random(seed)
    paras = reference_paragraphs()
    code = reference_code_blocks()
    rows = []
    for k in range(n):
        q = paras[(k * 3) % len(paras)][1]
        a = paras[(k * 3 + 1) % len(paras)][1]
        body = [f"<p><strong>Q:</strong> {q}</p>"]
        if rng.random() < 0.5:
            body.append(f"<pre><code>{code[k % len(code)]}</code></pre>")
        body.append(f'<p>A: {a} See <a href="https://docs.example.org/{k}">the docs</a>.</p>')
        if rng.random() < 0.3:
            body.append("<ul><li>first point</li><li>second &amp; last point</li></ul>")
        rows.append({"text": "\n".join(body), "source": f"qa:{paras[(k * 3) % len(paras)][0]}"})
    zh = catalog_pairs("zh_CN")
    for k in range(10):
        rows.append({"text": "<p>" + " ".join(v for _, v in zh[k * 5 : (k + 1) * 5]) + "</p>", "source": "qa:zh"})
    rows.append({"text": "<div><br/></div>", "source": "qa:empty"})
    rng.shuffle(rows)
    return _number(rows)


CODE_GLOBS = [
    ("lib/python3.11/json/*.py", ".py"),
    ("lib/python3.11/email/*.py", ".py"),
    ("lib/python3.11/http/*.py", ".py"),
    ("lib/python3.11/urllib/*.py", ".py"),
    ("lib/python3.11/logging/*.py", ".py"),
    ("lib/python3.11/sqlite3/*.py", ".py"),
    ("lib/python3.11/xml/dom/*.py", ".py"),
    ("lib/python3.11/wsgiref/*.py", ".py"),
]


def _code_files() -> list[tuple[str, str]]:
    files = []
    for pattern, suffix in CODE_GLOBS:
        files += [(p, suffix) for p in sorted(glob.glob(os.path.join(sys.base_prefix, pattern)))]
    files += [(p, ".h") for p in sorted(glob.glob("/usr/include/*.h"))[:60]]
    files += [(p, ".sh") for p in sorted(glob.glob("/usr/share/doc/*/examples/*.sh"))[:10]]
    return files


def build_code(seed: int = 13, n: int = 240, text_key: str = "text") -> list[dict]:
    """Source-file chunks (Python stdlib, C headers, shell) with DJ-style meta fields."""
    rng = random.Random(seed)
    files = _code_files()
    rows = []
    rng.shuffle(files)
    for path, suffix in files:
        try:
            lines = open(path, encoding="utf-8").read().split("\n")
        except (UnicodeDecodeError, OSError):
            continue
        start = 0 if rng.random() < 0.5 else rng.randrange(max(1, len(lines) - 20))
        length = rng.choice([6, 25, 40, 60, 90])
        chunk = "\n".join(lines[start : start + length]).strip("\n")
        if not chunk:
            continue
        rel = (
            os.path.relpath(path, "/")
            if not path.startswith(sys.base_prefix)
            else os.path.relpath(path, sys.base_prefix)
        )
        rows.append({text_key: chunk, "__dj__suffix__": suffix, "repo_path": rel, "lang": suffix.lstrip(".")})
        if len(rows) >= n:
            break
    # Planted: a copyright header, generated lines, non-code files, exact and near copies.
    for k in range(8):
        row = rows[k * 7]
        header = (
            "/*\n * Copyright (c) 2019 Example Corp.\n * All rights reserved.\n */\n"
            if row["lang"] == "h"
            else "# Copyright (c) 2019 Example Corp.\n# Licensed under the Example License.\n"
        )
        rows.append(dict(row, **{text_key: header + row[text_key]}))
    for k in range(6):
        rows.append(
            {
                text_key: "\n".join(f"DATA_{i:04d} = 0x{rng.getrandbits(64):016x}" for i in range(60)),
                "__dj__suffix__": ".py",
                "repo_path": f"generated/table_{k}.py",
                "lang": "py",
            }
        )
        rows.append(
            {
                text_key: "x" * rng.randint(600, 1200),
                "__dj__suffix__": ".txt",
                "repo_path": f"blob/{k}.txt",
                "lang": "txt",
            }
        )
    for row in rng.sample(rows, 10):
        rows.append(dict(row))
    for row in rng.sample(rows, 8):
        rows.append(dict(row, **{text_key: row[text_key].replace("    ", "  ")}))
    rng.shuffle(rows)
    return _number(rows)


def build_latex(seed: int = 17, n: int = 140) -> list[dict]:
    """Generated arXiv-style LaTeX sources over reference prose: preamble macros, comments, bibliography."""
    rng = random.Random(seed)
    paras = reference_paragraphs()
    rows = []
    for k in range(n):
        p = [paras[(k * 5 + j) % len(paras)][1] for j in range(5)]
        title = paras[(k * 5) % len(paras)][0].replace("-", " ").title()
        macros = [
            "\\newcommand{\\R}{\\mathbb{R}}",
            "\\newcommand{\\norm}[1]{\\left\\| #1 \\right\\|}",
            "\\def\\eps{\\varepsilon}",
            "\\newcommand{\\py}{\\texttt{Python}}",
        ]
        body = []
        body.append(
            "\\documentclass[11pt]{article}\n\\usepackage{amsmath,amssymb}\n" + "\n".join(rng.sample(macros, 3))
        )
        body.append(f"% draft {k}: do not circulate\n\\begin{{document}}\n\\title{{On {title}}}\n\\maketitle")
        body.append(f"\\begin{{abstract}}\n{p[0]}\n\\end{{abstract}}")
        has_section = rng.random() > 0.12
        if has_section:
            body.append(f"\\section{{Introduction}}\n{p[1]} % TODO: cite\nLet $x \\in \\R$ with $\\norm{{x}} < \\eps$.")
            body.append(
                f"\\subsection{{Semantics of \\py}}\n{p[2]}\n\\begin{{equation}}\n  f(x) = \\sum_{{i=1}}^n x_i^2\n\\end{{equation}}"
            )
            if rng.random() < 0.5:
                body.append("\\begin{comment}\nAn old paragraph kept for reference.\n\\end{comment}")
            body.append(f"\\section{{Discussion}}\n{p[3]}\n{p[4] if rng.random() < 0.5 else ''}")
        else:
            body.append(p[1])
        if rng.random() < 0.7:
            body.append(
                "\\begin{thebibliography}{9}\n\\bibitem{vr} G. van Rossum. The Python Language Reference.\n"
                "\\end{thebibliography}"
            )
        else:
            body.append("\\bibliographystyle{plain}\n\\bibliography{refs}")
        body.append("\\end{document}")
        text = "\n\n".join(body)
        if rng.random() < 0.2:
            text = plant(rng, text, rng.choice(["email", "link", "flagged"]))
        rows.append({"text": text, "source": f"generated-arxiv:{k}"})
    for row in rng.sample(rows, 8):
        rows.append(dict(row))
    rng.shuffle(rows)
    return _number(rows)


def build_alpaca_en(seed: int = 19, n: int = 240) -> list[dict]:
    """Instruction/response rows (Alpaca-CoT style) over reference prose and catalog messages."""
    rng = random.Random(seed)
    paras = reference_paragraphs()
    pairs = catalog_pairs("de")
    rows = []
    for k in range(n):
        topic, para = paras[(k * 7) % len(paras)]
        form = k % 4
        if form == 0:
            text = f"Summarize the following passage.\n{para}\nThe passage explains {topic.replace('-', ' ')}."
        elif form == 1:
            text = f"What does the Python reference say about {topic.replace('-', ' ')}?\n{para}"
        elif form == 2:
            en, de = pairs[k % len(pairs)]
            text = f"Translate into German: {en}\n{de}"
        else:
            text = f"Rewrite this sentence more simply: {para.split('. ')[0]}.\nIt means: {para.split('. ')[-1]}"
        if rng.random() < 0.08:
            text = plant(rng, text, "flagged")
        rows.append({"text": text, "instruction_id": k})
    for k in range(12):
        rows.append({"text": rng.choice(["Hi", "ok", "Yes.", "Thanks!", "No idea", "?"]), "instruction_id": 1000 + k})
        rows.append({"text": repetitive(rng, "Repeat after me."), "instruction_id": 2000 + k})
        rows.append({"text": symbol_soup(rng), "instruction_id": 3000 + k})
    for row in rng.sample(rows, 12):
        rows.append(dict(row, text=row["text"].upper()))  # document_deduplicator(lowercase) copies
    for row in rng.sample(rows, 12):
        rows.append(dict(row, text=row["text"].replace(" ", "  ").replace(".", "")))  # ignore_non_character copies
    for row in rng.sample(rows, 10):
        rows.append(dict(row, text=near_duplicate(rng, row["text"])))
    rng.shuffle(rows)
    return _number(rows)


def build_alpaca_zh(seed: int = 23, n: int = 240) -> list[dict]:
    """Chinese instruction/response rows from the machine's zh_CN message catalogs."""
    rng = random.Random(seed)
    pairs = catalog_pairs("zh_CN", limit_files=80)
    rows = []
    for k in range(n):
        en, zh = pairs[(k * 5) % len(pairs)]
        zh2 = pairs[(k * 5 + 1) % len(pairs)][1]
        form = k % 3
        if form == 0:
            text = f"把下面的句子翻译成中文：{en}\n{zh}"
        elif form == 1:
            text = f"请解释这条提示信息的含义：“{zh}”\n这条信息的意思是：{zh2}"
        else:
            text = f"{zh}{zh2}"
        if rng.random() < 0.1:
            text += rng.choice(FLAGGED_ZH) * rng.randint(1, 3)
        rows.append({"text": text, "instruction_id": k})
    for k in range(10):
        rows.append({"text": rng.choice(["好", "是的", "谢谢", "不知道", "嗯"]), "instruction_id": 1000 + k})
        rows.append({"text": "重复" * rng.randint(20, 60), "instruction_id": 2000 + k})
    for row in rng.sample(rows, 12):
        rows.append(dict(row, text=row["text"].replace("，", ",").replace("。", "")))
    for row in rng.sample(rows, 10):
        rows.append(dict(row, text=row["text"] + "！"))
    rng.shuffle(rows)
    return _number(rows)


def _number(rows: list[dict]) -> list[dict]:
    return [dict(row, row_id=i) for i, row in enumerate(rows)]


KINDS = {
    "prose": build_prose,
    "html": build_html,
    "code": build_code,
    "code_stack": lambda: build_code(seed=29, text_key="content"),
    "latex": build_latex,
    "alpaca_en": build_alpaca_en,
    "alpaca_zh": build_alpaca_zh,
}


def write_all(out_dir: str = INPUTS) -> dict[str, int]:
    os.makedirs(out_dir, exist_ok=True)
    counts = {}
    for kind, build in KINDS.items():
        rows = build()
        with open(os.path.join(out_dir, f"{kind}.jsonl"), "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        counts[kind] = len(rows)
    return counts


if __name__ == "__main__":
    print(write_all())
