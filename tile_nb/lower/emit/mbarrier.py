"""The PTX of the asynchronous pipelines (tma.py, cluster.py): mbarriers, TMA loads and cluster barriers, each
a call of a small inline device function whose source goes with the call (`intrin.device_helper`)."""
from __future__ import annotations

from tvm import tirx

from .intrin import asm_statement, device_helper

__all__ = [
    "cluster_sync",
    "fence_mbarrier_init",
    "mbarrier_arrive",
    "mbarrier_arrive_cluster",
    "mbarrier_expect_tx",
    "mbarrier_init",
    "mbarrier_wait",
    "tma_load",
]


def mbarrier_init(bar, count):
    return device_helper(
        "tnb_mbarrier_init",
        "void* bar, int count",
        "  unsigned b = (unsigned)__cvta_generic_to_shared(bar);\n"
        '  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\\n" :: "r"(b), "r"(count) : "memory");',
        bar,
        count,
    )


def fence_mbarrier_init():
    # Makes the initialised barriers visible to the async proxy (the TMA unit) before first use.
    return device_helper("tnb_fence_mbarrier_init", "",
                   '  asm volatile("fence.mbarrier_init.release.cluster;\\n" ::: "memory");')


def mbarrier_wait(bar, parity):
    return device_helper("tnb_mbarrier_wait", "void* bar, int parity",
                   '  unsigned b = (unsigned)__cvta_generic_to_shared(bar);\n'
                   '  asm volatile("{\\n.reg .pred done;\\nWAIT_%=:\\n"\n'
                   '               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\\n"\n'
                   '               "@!done bra WAIT_%=;\\n}\\n" :: "r"(b), "r"(parity) : "memory");',
                   bar, parity)


def mbarrier_arrive(bar):
    return device_helper("tnb_mbarrier_arrive", "void* bar",
                   '  unsigned b = (unsigned)__cvta_generic_to_shared(bar);\n'
                   '  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\\n" :: "r"(b) : "memory");',
                   bar)


def mbarrier_expect_tx(bar, nbytes):
    return device_helper("tnb_mbarrier_arrive_expect_tx", "void* bar, int nbytes",
                   '  unsigned b = (unsigned)__cvta_generic_to_shared(bar);\n'
                   '  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n"'
                   ' :: "r"(b), "r"(nbytes) : "memory");',
                   bar, nbytes)


def tma_load(rank, dst, tmap, bar, coords, multicast: int = 0):
    """A TMA load of one box into `dst`, completing on `bar`; with a `multicast` mask of CTAs of the cluster,
    into the same offsets of each of them (cluster.py)."""
    names = ", ".join(f"int c{i}" for i in range(rank))
    first = 4 if multicast else 3  # the operand number of the first coordinate
    ops = ", ".join(f"%{first + i}" for i in range(rank))
    cons = "".join(f', "r"(c{i})' for i in range(rank))
    suffix, mask_op, mask_in, mask_param = (
        (".multicast::cluster", ", %3", ', "h"(mask)', "unsigned short mask, ")
        if multicast
        else ("", "", "", "")
    )
    body = (
        "  unsigned d = (unsigned)__cvta_generic_to_shared(dst);\n"
        "  unsigned b = (unsigned)__cvta_generic_to_shared(bar);\n"
        "  asm "
        f'volatile("cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes{suffix}"\n'
        f'               " [%0], [%1, {{{ops}}}], [%2]{mask_op};\\n"\n'
        f'               :: "r"(d), "l"(tmap), "r"(b){mask_in}{cons} : "memory");'
    )
    name = f"tnb_tma_load_multicast_{rank}d" if multicast else f"tnb_tma_load_{rank}d"
    mask = (tirx.const(multicast, "uint16"),) if multicast else ()
    # The tensor map is a __grid_constant__ kernel parameter; TVM passes its address as an integer.
    return device_helper(name, f"void* dst, unsigned long long tmap, void* bar, {mask_param}{names}", body,
                         dst, tirx.address_of(tmap), bar, *mask, *coords)


def cluster_sync():
    """Every thread of the cluster: what each CTA wrote before (its barriers'
    initialisation) is seen by all."""
    return asm_statement(
        "tnb_cluster_sync", 'barrier.cluster.arrive.release;\\n" "barrier.cluster.wait.acquire;'
    )


def mbarrier_arrive_cluster(bar, cta):
    """One arrival on the barrier at `bar`'s offset in the shared memory of CTA `cta` of the cluster. With the
    default (release, CTA-scope) semantics, as CUTLASS's consumer release: the arriving warp only read the
    stage (its wgmma reads are complete), so nothing it wrote has to become visible to the other CTA."""
    return device_helper("tnb_mbarrier_arrive_cluster", "void* bar, unsigned cta",
                         '  unsigned b = (unsigned)__cvta_generic_to_shared(bar);\n'
                         '  asm volatile("{\\n.reg .b32 remote;\\n"\n'
                         '               "mapa.shared::cluster.u32 remote, %0, %1;\\n"\n'
                         '               "mbarrier.arrive.shared::cluster.b64 _, [remote];\\n}\\n"\n'
                         '               :: "r"(b), "r"(cta) : "memory");',
                         bar, cta)
