#!/usr/bin/env bash
# What the README's set-up (scripts/setup) downloads on a fresh Debian 12 machine besides the
# CUDA toolkit: the Debian packages it names with every dependency counted as if the machine
# had nothing installed (an upper bound: a real machine already has libc, gcc's runtime...),
# and the Python client's wheels with its test extra. Prints JSON.
#   bench/setup_footprint.sh > bench/results/setup_footprint.json
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=$(sed -n '/^apt_packages=(/,/^)/p' scripts/setup | sed '1d;$d' | tr -s ' \n' ' ')
empty=$(mktemp); wheels=$(mktemp -d)
trap 'rm -rf "$empty" "$wheels"' EXIT
read -r apt_n apt_bytes < <(apt-get -o Dir::State::status="$empty" --print-uris -qq install -y \
  --no-install-recommends $pkgs 2>/dev/null | awk '{s += $3; n++} END {print n, s}')
python3 -m pip download -q --disable-pip-version-check -d "$wheels" "clients/python[test]" >/dev/null
pip_n=$(ls "$wheels" | wc -l)
pip_bytes=$(du -sb "$wheels" | cut -f1)
python3 - "$apt_n" "$apt_bytes" "$pip_n" "$pip_bytes" "$pkgs" <<'PY'
import datetime, json, sys
apt_n, apt_b, pip_n, pip_b = (int(x) for x in sys.argv[1:5])
print(json.dumps({
    "what": "downloads of scripts/setup besides the CUDA toolkit",
    "date": datetime.date.today().isoformat(),
    "command": "bench/setup_footprint.sh",
    "debian_packages": {"count": apt_n, "mb": round(apt_b / 1e6, 1),
                        "note": "closure from an empty package database: an upper bound",
                        "named": sys.argv[5].split()},
    "python_wheels": {"count": pip_n, "mb": round(pip_b / 1e6, 1), "spec": "clients/python[test]"},
    "total_mb_upper_bound": round((apt_b + pip_b) / 1e6, 1),
    "extras_not_included": "scripts/setup-extras (PyTorch CPU wheel, trainer libraries)",
}, indent=1))
PY
