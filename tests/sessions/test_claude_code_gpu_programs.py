"""A session whose code is Triton and CUDA: each @triton.jit and __global__ function is a
kernel with its own timeline, each version in the program state it was written in, and
the states are Triton or CUDA programs whose entry is the script."""

from __future__ import annotations

from functools import partial

from sessions.importers.claude_code.gpu_sources import (
    cuda_kernels,
    read_gpu_program,
    triton_kernels,
)
from sessions.programs import Kernel, ProgramState
from tests.growth import growth_problem
from tests.sessions.importing import TRANSCRIPTS, ImportingTestCase
from tests.sessions.transcripts.build import SCALE_CU, program

TRITON_CUDA = TRANSCRIPTS / "triton-cuda.jsonl"


class GpuProgramImportTestCase(ImportingTestCase):
    def test_each_kernel_is_a_timeline_of_its_versions(self) -> None:
        report = self.run_import(TRITON_CUDA)
        self.assertIn("program state", report)
        kernels = {k.name: k for k in Kernel.objects.all()}
        self.assertEqual(
            sorted(kernels),
            [
                "add_relu-add_relu_kernel",
                "matmul-matmul_naive",
                "matmul-matmul_tiled",
                "scale-scale",
            ],
        )
        add_relu = kernels["add_relu-add_relu_kernel"]
        self.assertEqual(add_relu.title, "add_relu.py · @triton.jit add_relu_kernel")
        v1, v2, v3 = add_relu.versions.order_by("number")
        self.assertNotIn("mask", v1.source)
        self.assertIn("mask=mask", v2.source)
        # The benchmark changed the script, not the kernel: a version of the same kernel
        # text, run by the new script.
        self.assertEqual(v3.source, v2.source)
        self.assertTrue(v1.source.startswith("@triton.jit\ndef add_relu_kernel("))
        self.assertEqual(
            [v.meta["how"] for v in (v1, v2, v3)], ["write", "edit_original", "reconstructed"]
        )
        for version in (v1, v2, v3):
            self.assertEqual(version.meta["language"], "triton")
            self.assertEqual(version.meta["container"], "triton_jit")
            self.assertTrue(version.meta["program"])
            self.assertEqual(version.host_program, "")
        self.assertIn("do_bench", v3.state.file_data()["add_relu.py"].decode())

        naive = kernels["matmul-matmul_naive"]
        self.assertEqual(naive.title, "matmul.py · __global__ matmul_naive")
        n1, n2 = naive.versions.order_by("number")
        self.assertNotIn("row >= n", n1.source)
        self.assertIn("if (row >= n || col >= n) return;", n2.source)
        self.assertEqual(n1.meta["container"], "cuda_string")
        self.assertTrue(n1.source.startswith('extern "C" __global__ void matmul_naive('))
        self.assertTrue(n1.source.rstrip().endswith("}"))
        (tiled,) = kernels["matmul-matmul_tiled"].versions.all()
        self.assertIn("__shared__ float a_tile[TILE][TILE];", tiled.source)
        (scale,) = kernels["scale-scale"].versions.all()
        self.assertEqual(scale.meta["container"], "cuda_global")
        self.assertNotIn("program", scale.meta)  # a .cu file without main is no program

    def test_states_are_triton_and_cuda_programs(self) -> None:
        self.run_import(TRITON_CUDA)
        states = list(ProgramState.objects.order_by("number"))
        self.assertEqual(
            [(s.kind, s.entry) for s in states],
            [("triton", "add_relu.py")] * 3
            + [("cuda", "matmul.py")] * 3
            # A .cu file without main joins the project; the script still runs.
            + [("cuda", "matmul.py")],
        )
        self.assertEqual(states[-1].file_data()["kernels/scale.cu"].decode(), SCALE_CU)
        self.assertEqual(
            states[5].modules,
            [
                {"kernel": "add_relu-add_relu_kernel", "version": 3},
                {"kernel": "matmul-matmul_tiled", "version": 1},
            ],
        )
        naive = Kernel.objects.get(name="matmul-matmul_naive")
        self.assertEqual([v.state.number for v in naive.versions.order_by("number")], [4, 5])

    def test_each_kernel_has_a_timeline_page(self) -> None:
        self.run_import(TRITON_CUDA, "--visibility", "public")
        session = self.session()
        response = self.client.get(f"/s/{session.slug}/kernels/add_relu-add_relu_kernel/")
        self.assertEqual(response.status_code, 200)
        self.assertContains(response, "add_relu_kernel")
        (tiled,) = Kernel.objects.get(name="matmul-matmul_tiled").versions.all()
        page = self.client.get(f"/s/{session.slug}/")
        self.assertContains(page, f'id="turn-{tiled.turn.number}"')


class GpuSourcesTestCase(ImportingTestCase):
    def test_a_multi_line_signature_and_other_decorators(self) -> None:
        text = (
            "import triton\n\n\n"
            "def helper():\n    return 1\n"
            "@triton.autotune(\n    configs=[],\n    key=['n'],\n)\n@triton.jit\n"
            "def k(x_ptr,\n      n):\n    pid = 0\n\n    return\n\n\n"
            "@jit\ndef plain(x):\n    pass\n"
            "def not_a_kernel():\n    pass\n"
        )
        kernels = triton_kernels(text)
        self.assertEqual([k.entry for k in kernels], ["k", "plain"])
        self.assertTrue(kernels[0].source.startswith("@triton.autotune(\n"))
        self.assertTrue(kernels[0].source.endswith("    return\n"))
        self.assertNotIn("helper", kernels[0].source)

    def test_cuda_in_a_python_string_ends_with_the_string(self) -> None:
        text = 'src = r"""\n__global__ void k(float* x) {\n    x[0] = 1;\n"""\nprint("}")\n'
        (kernel,) = cuda_kernels(text, in_python=True)
        self.assertEqual(kernel.entry, "k")
        self.assertNotIn("print", kernel.source)
        self.assertEqual(read_gpu_program("a.py", text).kind, "cuda")

    def test_what_is_a_program(self) -> None:
        self.assertEqual(read_gpu_program("k.cu", SCALE_CU).kind, "")
        self.assertEqual(read_gpu_program("k.cu", SCALE_CU + "int main() {}\n").kind, "cuda")
        self.assertEqual(read_gpu_program("m.py", program("matmul_v3")).kind, "cuda")
        self.assertEqual(read_gpu_program("t.py", "import triton\n").kind, "triton")
        self.assertEqual(read_gpu_program("u.py", "import numpy\n").kind, "")

    def test_hostile_files_are_read_in_linear_time(self) -> None:
        hostile = {
            "globals": "__global__ ",
            "names": "__global__ void k(",
            "strings": '"""__global__ void k() {',
            "unclosed": "__global__ void k() {",
            "decorators": "@triton.jit\n",
            "signatures": "def k(\n",
            "bodies": "@triton.jit\ndef k():\n x = 1\n",
        }
        for name, unit in hostile.items():
            for path in ("x.py", "x.cu"):
                problem = growth_problem(
                    f"{name} in {path}",
                    partial(read_gpu_program, path),
                    unit.__mul__,
                    500,
                )
                self.assertEqual(problem, "")
