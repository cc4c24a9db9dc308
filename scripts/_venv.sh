# Sourced by scripts/demo and scripts/test: make .venv (Python >= 3.11) with tenure installed
# from this checkout, with the given extras (first argument, comma-separated) and development
# dependency groups of pyproject.toml (second argument, comma-separated, e.g. "test,bench"),
# reinstalling only when pyproject.toml changed. Groups need pip >= 25.1, which the install
# brings in first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
EXTRAS="${1:-}"
GROUPS_WANTED="${2:-}"

pick_python() {
    for candidate in "${TENURE_PYTHON:-}" python3.11 python3.12 python3.13 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
           "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"; return 0
        fi
    done
    echo "tenure needs Python >= 3.11 (set TENURE_PYTHON)" >&2
    return 1
}

if [ ! -x .venv/bin/python ]; then
    "$(pick_python)" -m venv .venv
fi
stamp=".venv/.tenure-installed-${EXTRAS:-core}-${GROUPS_WANTED:-nogroup}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING' || true
    spec="."
    [ -n "$EXTRAS" ] && spec=".[$EXTRAS]"
    groups=()
    for group in ${GROUPS_WANTED//,/ }; do groups+=(--group "$group"); done
    .venv/bin/python -m pip install -q -e "$spec" "${groups[@]}" 2>&1 | grep -v '^WARNING' || true
    .venv/bin/python -c 'import tenure' # fail here, not later, if the install did not work
    touch "$stamp"
fi
