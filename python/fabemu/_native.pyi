"""Type stubs of the native module (Rust, PyO3). Use the functions of `fabemu` instead."""

from typing import Any, Callable, Dict, List, Optional

__version__: str

class ScenarioError(ValueError):
    """A scenario (or an override of it) is invalid; ``str(e)`` is the command line's
    located message."""

    file: str
    line: Optional[int]
    column: Optional[int]
    field: str
    message: str

def check(
    path: Optional[str],
    text: Optional[str],
    name: str,
    set: List[str],
    seed: Optional[int] = None,
    fidelity: Optional[str] = None,
) -> List[str]: ...
def run(
    path: Optional[str],
    text: Optional[str],
    name: str,
    set: List[str],
    seed: Optional[int] = None,
    fidelity: Optional[str] = None,
    threads: int = 1,
    out: Optional[str] = None,
    pcap: Optional[str] = None,
    callback: Optional[Callable[[int, int, Optional[int]], Any]] = None,
) -> Dict[str, Any]: ...
def topo(
    path: Optional[str],
    text: Optional[str],
    name: str,
    set: List[str],
    astra_sim: Optional[str] = None,
) -> Dict[str, Any]: ...
def algo_export(op: str, algorithm: str, ranks: int, chunks: int) -> str: ...
def quickstart() -> str:
    """The embedded quickstart scenario's YAML."""
