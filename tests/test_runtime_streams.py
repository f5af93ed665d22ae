"""runtime.kernel.OneStreamAtATime: a kernel whose module keeps state during a launch (stream-K) takes turns
between streams. The logic is checked here with stand-ins for torch's streams and events (this machine has no
GPU); tests/test_gpu_gemm.py runs a stream-K kernel on two streams at once."""
import types

import pytest

torch = pytest.importorskip("torch")

from tile_nb.runtime.kernel import CompiledKernel, OneStreamAtATime  # noqa: E402


class FakeEvent:
    def __init__(self):
        self.recorded_on = []

    def record(self, stream):
        self.recorded_on.append(stream.name)


class FakeStream:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def wait_event(self, event):
        self.log.append(f"{self.name} waits for the event recorded on {event.recorded_on[-1]}")


@pytest.fixture
def fake_cuda(monkeypatch):
    log, current = [], {"stream": None}
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current["stream"])
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: current.get("capturing", False))
    return log, current


def tensor_on(index):
    return types.SimpleNamespace(is_cuda=True, device=types.SimpleNamespace(index=index))


def test_a_launch_on_another_stream_waits_for_the_previous_launch(fake_cuda):
    log, current = fake_cuda
    one, two = FakeStream("one", log), FakeStream("two", log)
    launch = OneStreamAtATime(lambda *args: log.append(f"launch on {current['stream'].name}"))
    for stream in (one, one, two, two, one):
        current["stream"] = stream
        launch(tensor_on(0), 3)
    assert log == ["launch on one", "launch on one",
                   "two waits for the event recorded on one", "launch on two", "launch on two",
                   "one waits for the event recorded on two", "launch on one"]


def test_devices_are_ordered_separately_and_cpu_calls_pass_through(fake_cuda):
    log, current = fake_cuda
    one, two = FakeStream("one", log), FakeStream("two", log)
    launch = OneStreamAtATime(lambda *args: log.append("launch"))
    current["stream"] = one
    launch(tensor_on(0))
    current["stream"] = two
    launch(tensor_on(1))  # another device: its own module and workspace, no wait
    launch(types.SimpleNamespace(is_cuda=False), 1.0)  # not on the GPU: the kernel's own checks answer
    assert log == ["launch", "launch", "launch"]


def test_only_stream_k_kernels_launch_through_it():
    def kernel(stream_k):
        k = CompiledKernel(name="k", target=None, arch="sm_90a", params=("a",), cuda_source="", lowered_ir="",
                           plan={"pipeline": "TMA + mbarriers, producer warp", "stream_k": stream_k})
        k._set_launch(object(), print)
        return k._func

    assert isinstance(kernel(True), OneStreamAtATime)
    assert kernel(False) is print


def test_a_graph_capture_launches_without_events(fake_cuda):
    log, current = fake_cuda
    one, two = FakeStream("one", log), FakeStream("two", log)
    launch = OneStreamAtATime(lambda *args: log.append(f"launch on {current['stream'].name}"))
    current["stream"] = one
    launch(tensor_on(0))
    current.update(stream=two, capturing=True)
    launch(tensor_on(0))  # captured: no wait on an event recorded outside the capture, none recorded
    current.update(capturing=False)
    launch(tensor_on(0))  # after the capture: ordered after the last launch outside it, on stream one
    assert log == [
        "launch on one",
        "launch on two",
        "two waits for the event recorded on one",
        "launch on two",
    ]
