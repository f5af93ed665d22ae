"""`T.breakpoint()` under Jupyter's debugger: a real IPython kernel with its debugger attached (the Debug
Adapter Protocol messages JupyterLab's debugger sends, through jupyter_client) stops in the kernel's frame at
the user's cell line, with the kernel's tiles and indices as its variables, and runs on after `continue`."""
import queue
import time

import pytest

pytest.importorskip("debugpy")
from jupyter_client.manager import start_new_kernel  # noqa: E402 - after the skip

# A bound on each wait for the kernel's replies, not a speed goal: the test takes ~40 s on an idle 2-core VM
# under Python 3.10, and a CI rehearsal run beside other work went past 60 s once.
TIMEOUT = 150

CELL = '''
import torch, tile_nb
import tile_nb.language as T

@tile_nb.jit
def doubled(X, Y):
    N = T.const("N")
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(1, threads=32) as bx:
        tile = T.alloc_fragment((N,), T.float32)
        T.copy(X, tile)
        T.breakpoint()
        for i in T.Parallel(N):
            Y[i] = tile[i] * 2

x = torch.tensor([3.0, -1.0, 0.5, 7.0]); y = torch.zeros(4)
doubled(x, y)
print("doubled", y.tolist())
'''
BREAKPOINT_LINE = CELL.splitlines().index("        T.breakpoint()") + 1


class _Debugger:
    """The client side of the kernel's debugger: DAP requests on the control channel, events on iopub."""

    def __init__(self, kc):
        self.kc, self.seq = kc, 0

    def request(self, command: str, arguments: dict | None = None) -> dict:
        self.seq += 1
        msg = self.kc.session.msg("debug_request", {"type": "request", "seq": self.seq, "command": command,
                                                    "arguments": arguments or {}})
        self.kc.control_channel.send(msg)
        while True:
            reply = self.kc.control_channel.get_msg(timeout=TIMEOUT)
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                assert reply["content"].get("success"), (command, reply["content"])
                return reply["content"]

    def wait(self, event: str, seen: list) -> dict:
        """The next debug event named `event`; other iopub messages' texts are kept in `seen`."""
        deadline = time.time() + TIMEOUT
        while time.time() < deadline:
            try:
                msg = self.kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                continue
            content = msg["content"]
            if msg["msg_type"] == "debug_event" and content.get("event") == event:
                return content
            if msg["msg_type"] in ("stream", "error"):
                seen.append(content.get("text") or f"{content['ename']}: {content['evalue']}")
        raise AssertionError(f"no '{event}' debug event in {TIMEOUT} s; the kernel said: {seen}")


@pytest.fixture
def kernel():
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_jupyters_debugger_stops_at_the_users_line_with_the_tiles(kernel):
    debugger, seen = _Debugger(kernel), []
    debugger.request("initialize", {"clientID": "tile_nb-test", "adapterID": "", "pathFormat": "path",
                                    "linesStartAt1": True, "columnsStartAt1": True})
    debugger.request("attach")
    debugger.wait("initialized", seen)
    debugger.request("configurationDone")

    kernel.execute(CELL)
    stopped = debugger.wait("stopped", seen)["body"]
    frames = debugger.request("stackTrace", {"threadId": stopped["threadId"]})["body"]["stackFrames"]
    top = frames[0]
    assert (top["name"], top["line"]) == ("doubled", BREAKPOINT_LINE), frames[:3]
    assert top["source"]["path"].endswith(".py")  # the cell's own file, which JupyterLab maps to the cell
    scope = debugger.request("scopes", {"frameId": top["id"]})["body"]["scopes"][0]
    variables = {v["name"]: v["value"] for v in
                 debugger.request("variables", {"variablesReference": scope["variablesReference"]})
                 ["body"]["variables"]}
    assert variables["tile"] == "tensor([ 3.0000, -1.0000,  0.5000,  7.0000])", variables
    assert variables["bx"] == "0" and variables["X"].startswith("tensor([ 3.0000")

    debugger.request("continue", {"threadId": stopped["threadId"]})
    deadline = time.time() + TIMEOUT
    # the kernel may send one print as several stdout messages ('doubled', ' [6.0, ...]', with a warning on
    # stderr between them): read stdout's joined
    stdout = []
    while "doubled [6.0, -2.0, 1.0, 14.0]" not in "".join(stdout) and time.time() < deadline:
        try:
            msg = kernel.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["msg_type"] == "stream" and msg["content"].get("name") == "stdout":
            stdout.append(msg["content"]["text"])
        elif msg["msg_type"] in ("stream", "error"):
            seen.append(msg["content"].get("text") or msg["content"].get("evalue", ""))
    assert "doubled [6.0, -2.0, 1.0, 14.0]" in "".join(stdout), (stdout, seen)
