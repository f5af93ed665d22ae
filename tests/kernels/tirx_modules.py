"""Thread-level TIRx modules, what tile_nb.lower hands to the backend: the backend and runtime tests compile
them without the tile language in between."""


def add_module(n_threads=128, dtype="float32"):
    """Thread-level TIRx elementwise add with a runtime length n (what tile_nb.lower hands to the backend)."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def add(a: T.handle, b: T.handle, c: T.handle, n: T.int32):
        A = T.match_buffer(a, (n,), dtype)
        B = T.match_buffer(b, (n,), dtype)
        C = T.match_buffer(c, (n,), dtype)
        T.device_entry()
        bx = T.cta_id([T.ceildiv(n, n_threads)])
        tx = T.thread_id([n_threads])
        i = bx * n_threads + tx
        if i < n:
            C[i] = A[i] + B[i]

    return tvm.IRModule({"main": add.with_attr("global_symbol", "add")})


def rowsum_module(rows=64, cols=256):
    """One CTA per row, the row staged in shared memory: a kernel with static shared memory and a barrier."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def rowsum(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (rows, cols), "float32")
        B = T.match_buffer(b, (rows,), "float32")
        T.device_entry()
        bx = T.cta_id([rows])
        tx = T.thread_id([cols])
        S = T.alloc_shared((cols,), "float32")
        S[tx] = A[bx, tx]
        T.evaluate(T.cuda.cta_sync())
        if tx == 0:
            acc = T.alloc_local((1,), "float32")
            acc[0] = T.float32(0)
            for i in range(cols):
                acc[0] = acc[0] + S[i]
            B[bx] = acc[0]

    return tvm.IRModule({"main": rowsum.with_attr("global_symbol", "rowsum")})
