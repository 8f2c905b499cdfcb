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
