"""White-box test: reads which implementation modules are loaded.

The faces' lazy names (PEP 562): loaded on first use, kept, and unknown names refused."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest

import ketch.llm
import ketch.tools


@pytest.mark.parametrize("face", [ketch.llm, ketch.tools], ids=lambda m: m.__name__)
def test_an_unknown_name_is_refused_as_a_module_refuses_it(face: ModuleType) -> None:
    with pytest.raises(AttributeError) as info:
        face.no_such_name  # noqa: B018
    assert str(info.value) == f"module '{face.__name__}' has no attribute 'no_such_name'"


def test_the_temporal_face_refuses_an_unknown_name() -> None:
    import ketch.temporal  # the test command installs the temporal extra

    with pytest.raises(AttributeError, match=r"^module 'ketch.temporal' has no attribute 'x'$"):
        ketch.temporal.x  # noqa: B018


def test_a_lazy_name_loads_its_module_on_first_use_and_is_kept() -> None:
    code = (
        "import sys, ketch.llm as llm\n"
        "print('ketch.llm._fallback' in sys.modules, 'FallbackModel' in vars(llm))\n"
        "cls = llm.FallbackModel\n"
        "print(sys.modules['ketch.llm._fallback'].FallbackModel is cls, vars(llm)['FallbackModel'] is cls)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "True", "True"]
