"""A worker maps buffers on its own thread (device.map_now), as wgpu-py's map_sync does
through its poll thread: the same bytes, the same state after, the same errors."""

from __future__ import annotations

import numpy as np
import pytest
import wgpu

from kernels.engine.device import map_now, read_now

USAGE = wgpu.BufferUsage


def copied(device, values: np.ndarray):
    """A MAP_READ buffer that a submitted copy filled with values."""
    source = device.create_buffer_with_data(data=values, usage=USAGE.COPY_SRC)
    read = device.create_buffer(size=values.nbytes, usage=USAGE.MAP_READ | USAGE.COPY_DST)
    encoder = device.create_command_encoder()
    encoder.copy_buffer_to_buffer(source, 0, read, 0, values.nbytes)
    device.queue.submit([encoder.finish()])
    return read


def test_a_read_mapping_holds_what_the_copy_wrote_and_unmaps_as_wgpu_py_s(gpu):
    device, _ = gpu
    values = np.arange(1024, dtype=np.float32)
    read = copied(device, values)

    map_now(read)

    assert read.map_state == "mapped"
    assert np.array_equal(np.frombuffer(read.read_mapped(), dtype=np.float32), values)
    read.unmap()
    assert read.map_state == "unmapped"
    map_now(read, offset=8, size=8)  # a range, mapped again
    assert np.frombuffer(read.read_mapped(), dtype=np.float32).tolist() == [2.0, 3.0]
    with pytest.raises(ValueError, match="range"):
        read.read_mapped(0, 4)  # outside the mapped range, as wgpu-py says
    read.unmap()


def test_a_write_mapping_is_written_and_reaches_the_device(gpu):
    device, _ = gpu
    written = device.create_buffer(size=16, usage=USAGE.MAP_WRITE | USAGE.COPY_SRC)
    storage = device.create_buffer(size=16, usage=USAGE.COPY_DST | USAGE.COPY_SRC)

    map_now(written, write=True)
    written.write_mapped(np.array([1, 2, 3, 4], dtype=np.uint32).tobytes())
    written.unmap()
    encoder = device.create_command_encoder()
    encoder.copy_buffer_to_buffer(written, 0, storage, 0, 16)
    device.queue.submit([encoder.finish()])

    assert np.frombuffer(read_now(device, storage), dtype=np.uint32).tolist() == [1, 2, 3, 4]


def test_a_mapping_webgpu_refuses_raises_and_leaves_the_buffer_unmapped(gpu):
    device, _ = gpu
    storage = device.create_buffer(size=16, usage=USAGE.STORAGE)

    with pytest.raises(wgpu.GPUValidationError, match="MAP_READ"):
        map_now(storage)

    assert storage.map_state == "unmapped"


def test_a_buffer_mapped_already_is_not_mapped_again(gpu):
    device, _ = gpu
    read = copied(device, np.zeros(4, dtype=np.float32))
    map_now(read)

    with pytest.raises(RuntimeError, match="unmapped"):
        map_now(read)

    read.unmap()
