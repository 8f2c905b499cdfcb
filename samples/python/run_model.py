#!/usr/bin/python3
"""run_model.py — run a deeprnn model from Python through the C API (ctypes).

What it shows: a model from a weight file or directory (PyTorch-named LSTM, sizes
read from the weights), a sequence streamed through it, errors as exceptions.
What it needs: a shared library built from the two files, e.g.
    g++ -std=c++17 -O2 -shared -fPIC deeprnn.cpp -o libdeeprnn.so -lopenblas -lboost_thread
(or `make shared`, which writes build/libdeeprnn.so); numpy if installed, else plain ctypes arrays.
What it prints: the sizes, then the first values of the last output frame.
Run: python3 samples/python/run_model.py [LIB] [WEIGHTS] [INPUT.npy]   (INPUT needs numpy; else all 0.5)
"""
import ctypes as C
import sys

lib = C.CDLL(sys.argv[1] if len(sys.argv) > 1 else "build/libdeeprnn.so")
weights = sys.argv[2] if len(sys.argv) > 2 else "samples/quickstart/model"
P, N = C.c_void_p, C.c_size_t
lib.deeprnn_last_error.restype = C.c_char_p
lib.deeprnn_model_create_from_file.argtypes = [C.c_char_p, P, P]  # config None: the defaults
lib.deeprnn_stream_push.argtypes = [P, P, N, C.c_int, P, N]


def check(status):
    if status != 0:
        raise RuntimeError(lib.deeprnn_last_error().decode())


model, stream, E, Y = P(), P(), C.c_int(), C.c_int()
check(lib.deeprnn_model_create_from_file(weights.encode(), None, C.byref(model)))
check(lib.deeprnn_model_sizes(model, C.byref(E), C.byref(Y)))
check(lib.deeprnn_stream_create(model, 1, C.byref(stream)))
try:
    import numpy as np
    x = np.load(sys.argv[3]) if len(sys.argv) > 3 else np.full((100, E.value), 0.5)
    x = np.ascontiguousarray(x, np.float32).reshape(-1, E.value)  # [T, E]: batch 1
    y = np.zeros(len(x) * Y.value, np.float32)  # [T, Y], flat like the ctypes array
    T, xp, yp = len(x), x.ctypes.data, y.ctypes.data
except ImportError:
    T = 100
    x, y = (C.c_float * (T * E.value))(*[0.5] * (T * E.value)), (C.c_float * (T * Y.value))()
    xp, yp = C.addressof(x), C.addressof(y)
check(lib.deeprnn_stream_push(stream, xp, T * E.value, T, yp, T * Y.value))
print(f"input size {E.value}, output size {Y.value}, {T} steps")
print("y[T-1][:4] =", [round(float(v), 6) for v in y[(T - 1) * Y.value:][:4]])
lib.deeprnn_stream_destroy(stream)
lib.deeprnn_model_destroy(model)
