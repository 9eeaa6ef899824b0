"""What opening a device costs a worker's start: wgpu-py's C types are parsed in one go
before it opens (kernels/engine/wgpu_types.py), and a backend asked for is the only one
loaded (kernels/engine/device.py).

Each check runs in a fresh interpreter: cffi keeps what it parsed for the life of a
process, and this one has opened devices already.
"""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kernels.engine.wgpu_types import REPLAY_TYPES

ROOT = Path(__file__).resolve().parents[2]


def in_fresh_python(script: str) -> Any:
    prelude = (
        "import json, os, tempfile\n"
        "os.environ.setdefault('XDG_RUNTIME_DIR', tempfile.mkdtemp())\n"
        "from wgpu.backends.wgpu_native._ffi import ffi\n"
        "from kernels.engine.wgpu_types import REPLAY_TYPES, parse_ahead\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", prelude + script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_a_replay_makes_no_type_that_was_not_parsed_ahead() -> None:
    seen = in_fresh_python(
        "from kernels.engine.device import open_device\n"
        "from kernels.engine.resident import DeviceBuffers\n"
        "from kernels.engine.worker import WARM_JOBS, Memo, run_job\n"
        "before = set(ffi._parsed_types)\n"
        "ahead = parse_ahead(ffi)\n"
        "device, env = open_device()\n"
        "statuses = [run_job(device, env, job, Memo(), DeviceBuffers())['status']\n"
        "            for job in WARM_JOBS]\n"
        "later = sorted(set(ffi._parsed_types) - before - set(REPLAY_TYPES))\n"
        "print(json.dumps({'ahead': ahead, 'statuses': statuses, 'later': later,\n"
        "                  'before': sorted(before & set(REPLAY_TYPES))}))\n"
    )
    assert seen["statuses"] == ["passed", "passed"]
    # Every listed type was parsed ahead, none was made afterwards that the list lacks.
    assert seen["ahead"] == len(REPLAY_TYPES) - len(seen["before"])
    assert seen["later"] == []


def test_each_type_parsed_ahead_is_the_one_a_parse_of_its_own_gives() -> None:
    differ = in_fresh_python(
        "assert parse_ahead(ffi) > 30\n"
        "differ = []\n"
        "for cdecl in REPLAY_TYPES:\n"
        "    kind = ffi._parser.parse_type(cdecl)\n"
        "    raw = kind.is_raw_function\n"
        "    if raw:\n"
        "        kind = kind.as_function_pointer()\n"
        "    with ffi._lock:\n"
        "        own = (ffi._get_cached_btype(kind), raw)\n"
        "    if ffi._parsed_types[cdecl] != own:\n"
        "        differ.append(cdecl)\n"
        "print(json.dumps(differ))\n"
    )
    assert differ == []


def test_a_type_cffi_cannot_parse_parses_nothing_ahead_and_the_rest_on_first_use() -> None:
    seen = in_fresh_python(
        "before = len(ffi._parsed_types)\n"
        "ahead = parse_ahead(ffi, ('WGPUBufferDescriptor *', 'NoSuchType *'))\n"
        "after = len(ffi._parsed_types)\n"
        "made = ffi.new('WGPUBufferDescriptor *')\n"
        "print(json.dumps({'ahead': ahead, 'added': after - before, 'made': bool(made)}))\n"
    )
    assert seen == {"ahead": 0, "added": 0, "made": True}


def test_a_backend_asked_for_is_the_only_one_the_instance_loads() -> None:
    seen = in_fresh_python(
        "import wgpu\n"
        "from kernels.engine.device import open_device\n"
        "_, env = open_device('vulkan')\n"
        "listed = [a.info['backend_type'] for a in wgpu.gpu.enumerate_adapters_sync()]\n"
        "_, again = open_device()\n"
        "print(json.dumps({'opened': env.backend, 'listed': listed, 'again': again.backend}))\n"
    )
    # Without the backend asked for, OpenGL's adapter is listed too (llvmpipe's, or the
    # GPU's through EGL).
    assert seen == {"opened": "Vulkan", "listed": ["Vulkan"], "again": "Vulkan"}
