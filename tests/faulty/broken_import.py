"""A module that fails while being imported (as a kernel module does without its GPU library)."""

raise RuntimeError("libcudart.so.12: cannot open shared object file")


def attention(q, k, v, *, scale):  # never reached
    return q
