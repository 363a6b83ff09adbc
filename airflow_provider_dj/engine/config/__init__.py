"""The recipe as data: YAML in, a frozen, validated model out; trigger-time overrides."""
