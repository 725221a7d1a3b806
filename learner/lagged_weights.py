"""Fixed lag across a resume: the k versions before a checkpoint's, saved with it and republished.

Under a fixed lag k (``--learner.lag fixed:k``) the actors sample step s with version s - k. A learner
resumed from the checkpoint of version c trains step c next, on groups sampled with version c - k,
and the prompts of steps c .. c + k - 1 that were issued but not answered (or the top-ups dynamic
sampling asks for) need versions c - k .. c - 1. Those weights lived in the weight transport,
which died with the driver. So a checkpoint keeps them (choice: saved, not recomputed; the only
alternative, keeping the optimizer states of k earlier checkpoints to retrain them, costs more):

    step_000012/lagged/v000000009.safetensors ... v000000011.safetensors     (k = 3, c = 12)

They are read back from the transport at save time (it keeps the newest k + 1 versions, so c - k
.. c are there) and republished into it on restore, after the checkpoint's own version c: any
actor can then load them by version (``transport.location_for``). The buffer's published version
is not touched (it never goes backwards). Cost: k extra copies of the weights (no optimizer
state) per checkpoint.
"""

from __future__ import annotations

from pathlib import Path

LAGGED_DIR = "lagged"


def lagged_versions(version: int, k: int) -> list[int]:
    """The versions a checkpoint at ``version`` must keep for fixed lag k: max(0, version - k) .. version - 1."""
    return list(range(max(0, version - k), version))


def _path(ckpt: Path, version: int) -> Path:
    return ckpt / LAGGED_DIR / f"v{version:09d}.safetensors"


def save_lagged(ckpt: Path, transport, versions: list[int]) -> list[int]:
    """Fetch ``versions`` from the transport and write them under ``ckpt/lagged/``; returns them."""
    from safetensors.torch import save_file

    (ckpt / LAGGED_DIR).mkdir(parents=True, exist_ok=True)
    for v in versions:
        try:
            tensors = transport.fetch(transport.location_for(v))
        except Exception as exc:
            raise RuntimeError(f"fixed lag: version {v} is needed after a resume from {ckpt.name} but the weight "
                               f"transport no longer has it ({type(exc).__name__}: {exc})") from exc
        save_file({name: t.contiguous() for name, t in tensors}, str(_path(ckpt, v)))
    return versions


def republish_lagged(ckpt: Path, transport) -> list[int]:
    """Publish every version saved under ``ckpt/lagged/`` into the transport again; returns them."""
    from safetensors.torch import load_file

    versions = sorted(int(f.stem[1:]) for f in (ckpt / LAGGED_DIR).glob("v*.safetensors"))
    for v in versions:
        transport.publish(list(load_file(str(_path(ckpt, v))).items()), v)
    return versions
