# setup.sh — sourced by the training recipes (train.sh, train_10ms.sh, train_30ms.sh):
# sets $here (this folder) and $root (the repository), moves to $root, installs
# what training needs and builds the C++ program whose features training uses.
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cd "$root"
tools/install-deps speech-train
make --no-print-directory build/deeprnn-speech
# One PyTorch thread and one BLAS thread: on a shared 2-core machine more threads spin and run slower.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# OpenBLAS 0.3.21 (Debian 12) does not know CPU models newer than it (an Emerald Rapids Xeon, model 207,
# for one) and falls back to its SSE3 "Prescott" kernels: PyTorch's LSTM training then runs 3.3x slower
# (2.31 against 0.70 s a batch of train.py's stage 2 on that Xeon). Where it falls back on a CPU with
# AVX-512 or AVX2, name the core OpenBLAS would have picked; a value already set is kept.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
    core=$(/usr/bin/python3 -c 'import ctypes; f = ctypes.CDLL("libopenblas.so.0").openblas_get_corename
f.restype = ctypes.c_char_p; print(f().decode())' 2>/dev/null || true)
    flags=$(grep -m1 '^flags' /proc/cpuinfo)
    case "$core:$flags" in
        Prescott:*avx512bw*) export OPENBLAS_CORETYPE=SkylakeX ;;
        Prescott:*avx2*) export OPENBLAS_CORETYPE=Haswell ;;
    esac
    [ -z "${OPENBLAS_CORETYPE:-}" ] || echo "setup.sh: OpenBLAS fell back to $core kernels on this CPU; OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE"
fi
