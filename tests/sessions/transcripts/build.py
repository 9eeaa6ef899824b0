"""Writes the Claude Code transcripts the importer tests read (run it to regenerate them).

The lines follow the real format (notes/claude-code-transcripts.md): the envelope fields
in Claude Code's order, one content block per assistant line, tool results as user
lines, uuids chained by parentUuid. The dialogue and kernels are ours. The secrets are
fake but shaped like real ones, so the redaction tests can look for them.

    .venv/bin/python tests/sessions/transcripts/build.py
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CWD = "/home/alice/wgsl-tutor"
START = datetime(2026, 5, 2, 10, 0, tzinfo=UTC)

# Fake secrets, shaped like the real thing.
ANTHROPIC_KEY = "sk-ant-api03-Zq8vN2xLr5TfW9kPjH3mYc7BdG4sA1eU6oIyRtXwQvLpKz0"
OPENAI_KEY = "sk-proj-7hT2kLmN9pQrS4vWxYz8aBcDeFgHiJkL"
GITHUB_TOKEN = "ghp_R4nd0mT0k3nV4lu3F0rT3st1ngPurp0s3sXy"
AWS_ACCESS = "AKIAZ7QX4MPLT3VNR2KD"
AWS_SECRET = "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"
BEARER = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJsZWFybmVyIn0.c2lnbmF0dXJlLWhlcmU"
DB_PASSWORD = "hunter2-but-longer"
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACBmYWtlLWtleS1mb3ItdGVzdHMtb25seS1ub3QtcmVhbAAAAAAAAAAAAAAA\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
SECRETS = [
    ANTHROPIC_KEY,
    OPENAI_KEY,
    GITHUB_TOKEN,
    AWS_ACCESS,
    AWS_SECRET,
    BEARER,
    DB_PASSWORD,
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
    "/home/alice",
    "alice/wgsl-tutor",
]


class Transcript:
    """Appends lines in Claude Code's shape; `self.last` is the parentUuid of the next."""

    def __init__(self, name: str, session: str | None = None, version: str = "2.1.76") -> None:
        self.name = name
        self.session = session or str(uuid.uuid5(uuid.NAMESPACE_URL, f"kernelbin/{name}"))
        self.version = version
        self.lines: list[dict[str, Any]] = []
        self.count = 0
        self.last: str | None = None
        self.clock = START

    def new_uuid(self) -> str:
        self.count += 1
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"kernelbin/{self.name}/{self.count}"))

    def tick(self, seconds: float = 3) -> str:
        self.clock += timedelta(seconds=seconds)
        return self.clock.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def envelope(self, kind: str, parent: str | None, **fields) -> dict[str, Any]:
        line = {
            "parentUuid": parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": CWD,
            "sessionId": self.session,
            "version": self.version,
            "gitBranch": "main",
            "type": kind,
        }
        line.update(fields)
        return line

    def add(self, line: dict[str, Any], chain: bool = True) -> str:
        line.setdefault("uuid", self.new_uuid())
        line.setdefault("timestamp", self.tick())
        self.lines.append(line)
        added: str = line["uuid"]
        if chain:
            self.last = added
        return added

    def user(self, content, parent: str | None = "last", **fields) -> str:
        parent = self.last if parent == "last" else parent
        message = {"role": "user", "content": content}
        return self.add(self.envelope("user", parent, message=message, **fields))

    def assistant(
        self,
        message_id: str,
        blocks: list[dict[str, Any]],
        stop_reason: str = "end_turn",
        parent: str | None = "last",
        **fields,
    ) -> list[str]:
        """One response, streamed as one line per block (each its own uuid, same id)."""
        uuids = []
        for k, block in enumerate(blocks):
            last_block = k == len(blocks) - 1
            message = {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": "claude-opus-4-6",
                "content": [block],
                "stop_reason": stop_reason if last_block else None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 4 + k,
                    "cache_creation_input_tokens": 1200,
                    "cache_read_input_tokens": 15000,
                    "output_tokens": 40 * (k + 1),
                    "service_tier": "standard",
                },
            }
            line = self.envelope(
                "assistant",
                self.last if parent == "last" else parent,
                message=message,
                requestId=f"req_{message_id[4:]}",
                **fields,
            )
            uuids.append(self.add(line))
            parent = "last"
        return uuids

    def result(
        self,
        tool_use_id: str,
        content,
        detail=None,
        is_error: bool = False,
        parent: str | None = "last",
        chain: bool = True,
        **fields,
    ) -> str:
        block = {"tool_use_id": tool_use_id, "type": "tool_result", "content": content}
        if is_error:
            block["is_error"] = True
        extra = dict(fields)
        if detail is not None:
            extra["toolUseResult"] = detail
        line = self.envelope(
            "user",
            self.last if parent == "last" else parent,
            message={"role": "user", "content": [block]},
            **extra,
        )
        return self.add(line, chain=chain)

    def system(self, subtype: str, parent: str | None = "last", **fields) -> str:
        line = self.envelope("system", self.last if parent == "last" else parent, subtype=subtype)
        line.update(fields)
        return self.add(line)

    def plain(self, line: dict[str, Any]) -> None:
        """A line without uuid (titles, snapshots, unknown bookkeeping)."""
        self.lines.append(line)

    def write(self) -> Path:
        path = HERE / f"{self.name}.jsonl"
        with path.open("w", encoding="utf-8") as handle:
            for line in self.lines:
                handle.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
        return path


class AgentTranscript(Transcript):
    """A sub-agent's lines: isSidechain, its agentId, and the parent's sessionId."""

    def __init__(self, parent: Transcript, agent_id: str) -> None:
        super().__init__(f"{parent.name}/agent-{agent_id}", session=parent.session)
        self.agent_id = agent_id
        self.clock = parent.clock

    def envelope(self, kind: str, parent: str | None, **fields) -> dict[str, Any]:
        line = super().envelope(kind, parent, **fields)
        line["isSidechain"] = True
        line["agentId"] = self.agent_id
        return line


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(tool_id: str, name: str, **params) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": params}


def thinking(value: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": value, "signature": "EqQBCkYIBxgCKkA" + "x" * 40}


# The kernels ---------------------------------------------------------------------------

MATMUL_PASTED = """// matmul.wgsl
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> n: u32;

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    var sum = 0.0;
    for (var k = 0u; k < n; k++) {
        sum += a[id.y * n + k] * b[k * n + id.x];
    }
    c[id.y * n + id.x] = sum;
}
"""

MATMUL_ON_DISK = MATMUL_PASTED.replace("// matmul.wgsl\n", "")
MATMUL_V2 = MATMUL_ON_DISK.replace("@workgroup_size(8, 8)", "@workgroup_size(16, 16)")
MATMUL_V3 = MATMUL_V2.replace(
    "    var sum = 0.0;\n",
    "    if (id.x >= n || id.y >= n) {\n        return;\n    }\n    var sum = 0.0;\n",
)

SHADERS_JS = """import { device } from "./gpu.js";

const WG = 64;

// Three passes of a softmax: max, exp-sum, normalise.
export const maxPass = /* wgsl */ `
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> m: array<f32>;

@compute @workgroup_size(${WG})
fn row_max(@builtin(global_invocation_id) id: vec3<u32>) {
    m[id.x] = max(m[id.x], x[id.x]);
}
`;

export const expPass = `
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> m: array<f32>;

@compute @workgroup_size(${WG})
fn exp_sum(@builtin(global_invocation_id) id: vec3<u32>) {
    x[id.x] = exp(x[id.x] - m[0]);
}
`;

export const normPass = `
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> total: array<f32>;

@compute @workgroup_size(${WG})
fn normalise(@builtin(global_invocation_id) id: vec3<u32>) {
    x[id.x] = x[id.x] / total[0];
}
`;

export function label(name) {
  return `softmax ${name} pass`;
}
"""


# One index.html: the matmul shader in a template string, and the host code around it.
# Version 1 swaps row and column in the product and sizes the dispatch with Math.floor;
# the index fix comes next, then Math.ceil.
MATMUL_HTML = """<!doctype html>
<html>
<head>
  <meta charset="utf-8">
  <title>Matmul on the GPU</title>
  <style>body { font-family: system-ui; }</style>
</head>
<body>
<h1>C = A B</h1>
<script type="module">
const M = 20, K = 16, N = 12;

const shader = `
struct Dims { m: u32, k: u32, n: u32, pad: u32 }
@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

@compute @workgroup_size(8, 8)
fn matmul(@builtin(global_invocation_id) id: vec3<u32>) {
    let row = id.y;
    let col = id.x;
    if (row >= dims.m || col >= dims.n) {
        return;
    }
    var sum = 0.0;
    for (var i = 0u; i < dims.k; i++) {
        sum += a[col * dims.k + i] * b[i * dims.n + row];
    }
    c[row * dims.n + col] = sum;
}
`;

async function main() {
  const adapter = await navigator.gpu.requestAdapter();
  const device = await adapter.requestDevice();

  const a = new Float32Array(M * K).map((_, i) => (i % 7) - 3);
  const b = new Float32Array(K * N).map((_, i) => (i % 5) * 0.5);
  const dims = new Uint32Array([M, K, N, 0]);

  const upload = (data, usage) => {
    const buffer = device.createBuffer({ size: data.byteLength, usage: usage | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(buffer, 0, data);
    return buffer;
  };
  const dimsBuffer = upload(dims, GPUBufferUsage.UNIFORM);
  const aBuffer = upload(a, GPUBufferUsage.STORAGE);
  const bBuffer = upload(b, GPUBufferUsage.STORAGE);
  const cBuffer = device.createBuffer({ size: M * N * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
  const readBuffer = device.createBuffer({ size: M * N * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });

  const module = device.createShaderModule({ code: shader });
  const pipeline = device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "matmul" } });
  const bindGroup = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [
      { binding: 0, resource: { buffer: dimsBuffer } },
      { binding: 1, resource: { buffer: aBuffer } },
      { binding: 2, resource: { buffer: bBuffer } },
      { binding: 3, resource: { buffer: cBuffer } },
    ],
  });

  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.floor(N / 8), Math.floor(M / 8));
  pass.end();
  encoder.copyBufferToBuffer(cBuffer, 0, readBuffer, 0, M * N * 4);
  device.queue.submit([encoder.finish()]);

  await readBuffer.mapAsync(GPUMapMode.READ);
  const c = new Float32Array(readBuffer.getMappedRange().slice(0));
  readBuffer.unmap();
  console.log("c[0][0] =", c[0], "c[M-1][N-1] =", c[M * N - 1]);
}

main();
</script>
</body>
</html>
"""
SWAPPED = "        sum += a[col * dims.k + i] * b[i * dims.n + row];\n"
INDEXED = "        sum += a[row * dims.k + i] * b[i * dims.n + col];\n"
FLOOR = "  pass.dispatchWorkgroups(Math.floor(N / 8), Math.floor(M / 8));\n"
CEIL = "  pass.dispatchWorkgroups(Math.ceil(N / 8), Math.ceil(M / 8));\n"
MATMUL_HTML_V2 = MATMUL_HTML.replace(SWAPPED, INDEXED)
MATMUL_HTML_V3 = MATMUL_HTML_V2.replace(FLOOR, CEIL)


# Transcript 1: a review with edits, compaction, a sub-agent, secrets ----------------------


def matmul_review() -> Transcript:
    t = Transcript("matmul-review")
    path = f"{CWD}/kernels/matmul.wgsl"
    t.plain(
        {
            "type": "file-history-snapshot",
            "messageId": "msg_snapshot",
            "snapshot": {
                "messageId": "msg_snapshot",
                "trackedFileBackups": {},
                "timestamp": t.tick(0),
            },
            "isSnapshotUpdate": False,
        }
    )
    t.user(
        "Caveat: The messages below were generated by the user while running local commands. "
        "DO NOT respond to these messages or otherwise consider them in your response unless "
        "the user explicitly asks you to.",
        parent=None,
        isMeta=True,
    )
    t.user(
        "<command-name>/model</command-name>\n<command-message>model</command-message>\n<command-args>opus</command-args>"
    )
    t.user("<local-command-stdout>Set model to opus (claude-opus-4-6)</local-command-stdout>")
    t.plain({"type": "ai-title", "sessionId": t.session, "aiTitle": "Fixing a matmul kernel"})
    t.user(
        "I'm learning WebGPU compute. Here is my first matmul kernel; it gives garbage past "
        "row 64 when n = 100. Can you review it?\n\n"
        f"```wgsl\n{MATMUL_PASTED}```\n\n"
        f"(The runner reads ANTHROPIC_API_KEY from .env; mine is {ANTHROPIC_KEY}, in case it matters.)"
    )
    # Streaming: thinking, text and two parallel tool calls share one message.id.
    a = t.assistant(
        "msg_01MatmulReview",
        [
            thinking("The dispatch size probably doesn't match the workgroup size. Check both."),
            text("Let me look at the kernel file and at how you dispatch it."),
            tool_use("toolu_01Read", "Read", file_path=path),
            tool_use("toolu_01Grep", "Grep", pattern="dispatchWorkgroups", path=f"{CWD}/src"),
        ],
        stop_reason="tool_use",
    )
    read_call, grep_call = a[2], a[3]
    # A hook's progress line hangs off the first call (a fake fork, never shown).
    t.add(
        t.envelope(
            "progress",
            read_call,
            data={"type": "hook_progress", "hookEvent": "PreToolUse", "hookName": "lint"},
            toolUseID="toolu_01Read",
            parentToolUseID="toolu_01Read",
        ),
        chain=False,
    )
    # The results arrive out of order: Grep's first, on the main line; Read's later,
    # hanging off its own call.
    t.result(
        "toolu_01Grep",
        "src/main.js:41:  pass.dispatchWorkgroups(Math.ceil(n / 16), Math.ceil(n / 16));",
        {
            "mode": "content",
            "numFiles": 1,
            "filenames": ["src/main.js"],
            "content": "…",
            "numLines": 1,
        },
        parent=grep_call,
    )
    t.result(
        "toolu_01Read",
        "".join(f"{k:>6}\t{line}\n" for k, line in enumerate(MATMUL_ON_DISK.splitlines(), 1)),
        {
            "type": "text",
            "file": {
                "filePath": path,
                "content": MATMUL_ON_DISK,
                "numLines": len(MATMUL_ON_DISK.splitlines()),
                "startLine": 1,
                "totalLines": len(MATMUL_ON_DISK.splitlines()),
            },
        },
        parent=read_call,
        chain=False,
    )
    t.assistant(
        "msg_02MatmulFix",
        [
            text(
                "Found it. Your shader declares `@workgroup_size(8, 8)` but `main.js` dispatches "
                "`ceil(n / 16)` groups per axis, so only the top-left quarter of `c` is written "
                "beyond row 64. Make the two agree:"
            ),
            tool_use(
                "toolu_02Edit",
                "Edit",
                file_path=path,
                old_string="@workgroup_size(8, 8)",
                new_string="@workgroup_size(16, 16)",
                replace_all=False,
            ),
        ],
        stop_reason="tool_use",
    )
    t.result(
        "toolu_02Edit",
        f"The file {path} has been updated. Here's the result of running `cat -n` on a snippet "
        "of the edited file:\n     6\t@compute @workgroup_size(16, 16)\n     7\tfn main(",
        {
            "filePath": path,
            "oldString": "@workgroup_size(8, 8)",
            "newString": "@workgroup_size(16, 16)",
            "originalFile": MATMUL_ON_DISK,
            "structuredPatch": [
                {
                    "oldStart": 6,
                    "oldLines": 1,
                    "newStart": 6,
                    "newLines": 1,
                    "lines": [
                        "-@compute @workgroup_size(8, 8)",
                        "+@compute @workgroup_size(16, 16)",
                    ],
                }
            ],
            "userModified": False,
            "replaceAll": False,
        },
    )
    t.assistant(
        "msg_03Review",
        [text("Now every invocation covers one cell of `c`. Run it again with n = 100.")],
    )
    t.system("turn_duration", durationMs=48211, isMeta=False)
    t.user(
        [
            text(
                "Rows past 64 look right now, but I get a crash on n = 100 and junk in the "
                f"last column. Here's my runner config: DATABASE_URL=postgres://kb:{DB_PASSWORD}@db.internal:5432/kernels "
                f"and export GITHUB_TOKEN={GITHUB_TOKEN}"
            ),
            {
                "type": "image",
                "source": {
                    "type": "base64",
                    "media_type": "image/png",
                    "data": "iVBORw0KGgo" + "A" * 64,
                },
            },
        ]
    )
    t.assistant(
        "msg_04Check",
        [
            {"type": "thinking", "thinking": "", "signature": "ErUBCkYIBxgCKkB" + "y" * 40},
            tool_use(
                "toolu_04Bash",
                "Bash",
                command=f'curl -s -H "Authorization: Bearer {BEARER}" https://runner.internal/env',
                description="Ask the runner which environment it sees",
            ),
        ],
        stop_reason="tool_use",
    )
    t.result(
        "toolu_04Bash",
        f"AWS_ACCESS_KEY_ID={AWS_ACCESS}\naws_secret_access_key = {AWS_SECRET}\n{PRIVATE_KEY}\n"
        f"OPENAI_API_KEY={OPENAI_KEY}\nworkdir={CWD}",
        {
            "stdout": f"AWS_ACCESS_KEY_ID={AWS_ACCESS}\naws_secret_access_key = {AWS_SECRET}\n{PRIVATE_KEY}",
            "stderr": "",
            "interrupted": False,
            "isImage": False,
        },
    )
    # An Edit whose result has no toolUseResult (older versions, nested agents): rebuilt
    # on the previous version.
    t.assistant(
        "msg_05Bounds",
        [
            text(
                "The crash is the out-of-bounds write: with 16×16 groups and n = 100 the last "
                "groups run past the matrix. Guard the invocation:"
            ),
            tool_use(
                "toolu_05Edit",
                "Edit",
                file_path=path,
                old_string="    var sum = 0.0;\n",
                new_string="    if (id.x >= n || id.y >= n) {\n        return;\n    }\n    var sum = 0.0;\n",
            ),
        ],
        stop_reason="tool_use",
    )
    t.result("toolu_05Edit", f"The file {path} has been updated.")
    # The learner rejects the next edit.
    t.assistant(
        "msg_06Tile",
        [
            text("While we're here, a tiled version would be much faster:"),
            tool_use(
                "toolu_06Edit",
                "Edit",
                file_path=path,
                old_string="@workgroup_size(16, 16)",
                new_string="@workgroup_size(32, 32)",
            ),
        ],
        stop_reason="tool_use",
    )
    t.result(
        "toolu_06Edit",
        "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if "
        "it was a file edit, the new_string was NOT written to the file). STOP what you are doing "
        "and wait for the user to tell you how to proceed.",
        "Error: The user doesn't want to proceed with this tool use.",
        is_error=True,
    )
    t.user([text("[Request interrupted by user for tool use]")])
    t.user("No tiling yet, I want to understand the simple one first. Is the guard enough?")
    t.assistant(
        "msg_07Guard",
        [
            text("Yes: the guard makes the extra invocations return before they touch memory."),
            {
                "type": "server_tool_use",
                "id": "srvtoolu_01",
                "name": "web_search",
                "input": {"query": "wgsl workgroup size limits"},
            },
        ],
    )
    # A line of a type this importer has never heard of, in the chain, and one without uuid.
    t.add(t.envelope("bookmark", t.last, label="guard explained", color="yellow"))
    t.plain({"type": "telemetry-flush", "events": 3, "timestamp": t.tick()})
    # Compaction: a new root, stitched back by logicalParentUuid.
    before = t.last
    t.system(
        "compact_boundary",
        parent=None,
        logicalParentUuid=before,
        content="Conversation compacted",
        level="info",
        isMeta=False,
        compactMetadata={"trigger": "auto", "preTokens": 174366},
    )
    t.user(
        "This session is being continued from a previous conversation that ran out of context. "
        "The summary below covers the earlier portion of the conversation.\n\nSummary:\n"
        "1. Primary Request and Intent: review a naive matmul kernel in kernels/matmul.wgsl.\n"
        "2. Fixed the workgroup size and added a bounds guard.",
        isCompactSummary=True,
        isVisibleInTranscriptOnly=True,
    )
    t.user("Can you make the inner loop read b with a stride-1 pattern?")
    t.assistant(
        "msg_08Stride",
        [
            text("Swap the loop so `b` is read along rows:"),
            # The learner had changed this line in their editor: our rebuilt file lacks it.
            tool_use(
                "toolu_08Edit",
                "Edit",
                file_path=path,
                old_string="        sum += a[id.y * n + k] * b[k * n + id.x]; // checked\n",
                new_string="        sum += a[id.y * n + k] * bt[id.x * n + k];\n",
            ),
        ],
        stop_reason="tool_use",
    )
    t.result("toolu_08Edit", f"The file {path} has been updated.")
    t.assistant(
        "msg_09Explain",
        [text("That reads `bt` (b transposed) contiguously, which is cache friendly.")],
    )
    # A sub-agent, embedded in this file as sidechain lines (older layout).
    t.user("Please check my other kernels for the same dispatch bug.")
    t.assistant(
        "msg_10Agent",
        [
            tool_use(
                "toolu_10Task",
                "Task",
                description="Check kernels for dispatch mismatches",
                prompt="Look at every .wgsl file under kernels/ and compare its workgroup size with the dispatch in src/main.js.",
                subagent_type="general-purpose",
            )
        ],
        stop_reason="tool_use",
    )
    task_line = t.last
    agent = "a7f3c2e"
    side_root = t.add(
        {
            **t.envelope(
                "user",
                None,
                message={
                    "role": "user",
                    "content": "Look at every .wgsl file under kernels/ and compare its workgroup size with the dispatch in src/main.js.",
                },
            ),
            "isSidechain": True,
            "agentId": agent,
        },
        chain=False,
    )
    side_a = t.add(
        {
            **t.envelope(
                "assistant",
                side_root,
                message={
                    "id": "msg_S1",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-haiku-4-5",
                    "content": [tool_use("toolu_S1Glob", "Glob", pattern="kernels/*.wgsl")],
                    "stop_reason": "tool_use",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 20},
                },
            ),
            "isSidechain": True,
            "agentId": agent,
        },
        chain=False,
    )
    side_r = t.add(
        {
            **t.envelope(
                "user",
                side_a,
                message={
                    "role": "user",
                    "content": [
                        {
                            "tool_use_id": "toolu_S1Glob",
                            "type": "tool_result",
                            "content": "kernels/matmul.wgsl\nkernels/reduce.wgsl",
                        }
                    ],
                },
            ),
            "isSidechain": True,
            "agentId": agent,
        },
        chain=False,
    )
    t.add(
        {
            **t.envelope(
                "assistant",
                side_r,
                message={
                    "id": "msg_S2",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-haiku-4-5",
                    "content": [
                        text(
                            "Only matmul.wgsl had the mismatch; reduce.wgsl uses 256 and dispatches n / 256."
                        )
                    ],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 30, "output_tokens": 25},
                },
            ),
            "isSidechain": True,
            "agentId": agent,
        },
        chain=False,
    )
    t.last = task_line
    t.result(
        "toolu_10Task",
        [
            text(
                "Only matmul.wgsl had the mismatch; reduce.wgsl uses 256 and dispatches n / 256.\nagentId: a7f3c2e (use SendMessage to continue)"
            )
        ],
        {
            "status": "completed",
            "agentId": agent,
            "content": [text("Only matmul.wgsl had the mismatch.")],
            "totalDurationMs": 5120,
            "totalTokens": 2210,
            "totalToolUseCount": 1,
        },
    )
    t.assistant(
        "msg_11Done", [text("Good news: only `matmul.wgsl` had it, and that one is fixed.")]
    )
    t.plain(
        {
            "type": "custom-title",
            "customTitle": "Matmul: the dispatch and bounds bugs",
            "sessionId": t.session,
        }
    )
    t.plain(
        {
            "type": "last-prompt",
            "lastPrompt": "Please check my other kernels",
            "leafUuid": t.last,
            "sessionId": t.session,
        }
    )
    return t


# Transcript 2: a JS file with three shaders, a resume and a rewind -----------------------


def softmax_js() -> Transcript:
    t = Transcript("softmax-js", version="2.1.12")
    path = f"{CWD}/src/shaders.js"
    # Claude Code writes summaries at the top: this one's leaf is this session's last line.
    summary: dict[str, str | None] = {
        "type": "summary",
        "summary": "Softmax in three WebGPU passes",
        "leafUuid": "",
    }
    t.plain(summary)
    t.user(
        "I split softmax into three compute passes in src/shaders.js. Can you write the file from my notes?",
        parent=None,
    )
    t.assistant(
        "msg_21Write",
        [
            text("Here it is, one template string per pass:"),
            tool_use("toolu_21Write", "Write", file_path=path, content=SHADERS_JS),
        ],
        stop_reason="tool_use",
    )
    t.result(
        "toolu_21Write",
        f"File created successfully at: {path}",
        {
            "type": "create",
            "filePath": path,
            "content": SHADERS_JS,
            "structuredPatch": [],
            "originalFile": None,
        },
    )
    t.assistant("msg_22Note", [text("Each pass is its own pipeline; `row_max` must run first.")])
    prompt_parent = t.last
    # The learner asks something, gets an answer, then rewinds (Esc Esc) and asks again.
    t.user("Should I use atomics for the max?")
    t.assistant(
        "msg_23Atomics",
        [text("WGSL has no atomic max for f32, so you would need a bitcast trick.")],
    )
    t.user("Why does exp_sum subtract m[0] instead of m[id.x]?", parent=prompt_parent)
    t.assistant(
        "msg_24Fix",
        [
            text("It should subtract the row maximum. Fixing the exp pass only:"),
            tool_use(
                "toolu_24Edit",
                "Edit",
                file_path=path,
                old_string="    x[id.x] = exp(x[id.x] - m[0]);",
                new_string="    x[id.x] = exp(x[id.x] - m[id.x / 64u]);",
            ),
        ],
        stop_reason="tool_use",
    )
    t.result(
        "toolu_24Edit",
        f"The file {path} has been updated.",
        {
            "filePath": path,
            "oldString": "    x[id.x] = exp(x[id.x] - m[0]);",
            "newString": "    x[id.x] = exp(x[id.x] - m[id.x / 64u]);",
            "originalFile": SHADERS_JS,
            "structuredPatch": [],
            "userModified": False,
            "replaceAll": False,
        },
    )
    t.assistant("msg_25Review", [text("Now each row subtracts its own maximum.")])
    # A resume: Claude Code replays the conversation so far into the file (same uuids,
    # another sessionId), then carries on.
    replayed = [dict(line) for line in t.lines if "uuid" in line]
    for line in replayed:
        line["sessionId"] = "c0ffee00-0000-4000-8000-000000000002"
        t.lines.append(line)
    t.session = "c0ffee00-0000-4000-8000-000000000002"
    t.user(
        "Thanks! And the learner's version of the normalise pass, does this look right?\n\n```wgsl\n@group(0) @binding(0) var<storage, read_write> x: array<f32>;\n@group(0) @binding(1) var<storage, read> total: array<f32>;\n\n@compute @workgroup_size(64)\nfn normalise(@builtin(global_invocation_id) id: vec3<u32>) {\n    x[id.x] = x[id.x] / max(total[0], 1e-20);\n}\n```"
    )
    t.assistant("msg_26Norm", [text("Yes, and the `max` guards against dividing by zero.")])
    summary["leafUuid"] = t.last
    return t


# Transcript 3: one index.html, its shader and host code fixed in three steps --------------


def matmul_html() -> Transcript:
    t = Transcript("matmul-html")
    path = f"{CWD}/index.html"
    t.user(
        "Write me one index.html that multiplies a 20 x 16 matrix by a 16 x 12 one with a "
        "WebGPU compute shader, 8 x 8 workgroups, and logs two cells of the result.",
        parent=None,
    )
    t.assistant(
        "msg_31Write",
        [
            text("Here is the page: the WGSL is a template string, the host code below it."),
            tool_use("toolu_31Write", "Write", file_path=path, content=MATMUL_HTML),
        ],
        stop_reason="tool_use",
    )
    t.result(
        "toolu_31Write",
        f"File created successfully at: {path}",
        {"type": "create", "filePath": path, "content": MATMUL_HTML, "structuredPatch": []},
    )
    t.assistant("msg_32Try", [text("Open it in Chrome and compare c[0][0] with numpy.")])
    t.user("c[0][0] is wrong, and the last cell is 0.")
    t.assistant(
        "msg_33Index",
        [
            text("The product reads `a` by column and `b` by row: swap them back."),
            tool_use(
                "toolu_33Edit", "Edit", file_path=path, old_string=SWAPPED, new_string=INDEXED
            ),
        ],
        stop_reason="tool_use",
    )
    t.result(
        "toolu_33Edit",
        f"The file {path} has been updated.",
        {
            "filePath": path,
            "oldString": SWAPPED,
            "newString": INDEXED,
            "originalFile": MATMUL_HTML,
            "structuredPatch": [],
            "userModified": False,
            "replaceAll": False,
        },
    )
    t.assistant("msg_34Review", [text("c[0][0] should match now. What about the last cell?")])
    t.user("c[0][0] matches, but the last cell is still 0.")
    t.assistant(
        "msg_35Ceil",
        [
            text(
                "`Math.floor(12 / 8)` is 1 workgroup: 8 columns of 12. `dispatchWorkgroups` "
                "counts workgroups, so round up:"
            ),
            tool_use("toolu_35Edit", "Edit", file_path=path, old_string=FLOOR, new_string=CEIL),
        ],
        stop_reason="tool_use",
    )
    t.result("toolu_35Edit", f"The file {path} has been updated.")
    t.assistant("msg_36Done", [text("Now 2 x 3 workgroups cover all 12 x 20 cells.")])
    return t


# The second showcase's programs (fixtures/triton_cuda/programs/): a Triton add + ReLU and
# a CUDA matmul in cupy.RawKernel strings, as a session writes and edits them.
PROGRAMS = HERE.parent.parent.parent / "fixtures" / "triton_cuda" / "programs"
SCALE_CU = """#include <cuda_runtime.h>

// Scales a vector in place; loaded by a script with cupy.RawModule.
__global__ void scale(float* x, float factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] *= factor;
    }
}
"""


def program(name: str) -> str:
    return (PROGRAMS / f"{name}.py").read_text()


def changed_lines(old: str, new: str) -> tuple[str, str]:
    """The lines an Edit replaces to make new from old: what lies between the lines they
    begin and end with in common (one line more where new only adds lines)."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    if start == len(a) - end:  # nothing replaced: take the line before as the anchor
        start -= 1
    return "".join(a[start : len(a) - end]), "".join(b[start : len(b) - end])


def triton_cuda() -> Transcript:
    """A learner writes a fused add + ReLU in Triton (unmasked, masked, benchmarked) and a
    CUDA matmul (naive, guarded, tiled in shared memory), then a .cu file."""
    t = Transcript("triton-cuda")
    add_relu, matmul = f"{CWD}/add_relu.py", f"{CWD}/matmul.py"
    t.user(
        "Write a fused add + ReLU in Triton for float32 vectors, with a test against "
        "torch.relu(x + y).",
        parent=None,
    )
    v1 = program("add_relu_v1")
    t.assistant(
        "msg_41Write",
        [
            text("One program per 1,024 elements: load x and y, add, clamp at 0, store."),
            tool_use("toolu_41Write", "Write", file_path=add_relu, content=v1),
        ],
        stop_reason="tool_use",
    )
    t.result(
        "toolu_41Write",
        f"File created successfully at: {add_relu}",
        {"type": "create", "filePath": add_relu, "content": v1, "structuredPatch": []},
    )
    t.user(
        "The test passes, but compute-sanitizer says: Invalid __global__ read of size 4 "
        "in add_relu_kernel. 98,432 is not a multiple of 1,024."
    )
    v2 = program("add_relu_v2")
    old, new = changed_lines(v1, v2)
    t.assistant(
        "msg_42Mask",
        [
            text("The last program reads and writes past the end: mask its lanes."),
            tool_use("toolu_42Edit", "Edit", file_path=add_relu, old_string=old, new_string=new),
        ],
        stop_reason="tool_use",
    )
    t.result(
        "toolu_42Edit",
        f"The file {add_relu} has been updated.",
        {
            "filePath": add_relu,
            "oldString": old,
            "newString": new,
            "originalFile": v1,
            "structuredPatch": [],
            "userModified": False,
            "replaceAll": False,
        },
    )
    t.user("Clean now. Is it faster than PyTorch?")
    old, new = changed_lines(v2, program("add_relu_v3"))
    t.assistant(
        "msg_43Bench",
        [
            text("Time both with triton.testing.do_bench on 16M elements:"),
            tool_use("toolu_43Edit", "Edit", file_path=add_relu, old_string=old, new_string=new),
        ],
        stop_reason="tool_use",
    )
    t.result("toolu_43Edit", f"The file {add_relu} has been updated.")
    t.user("Now a CUDA matmul, naive first, through cupy.")
    m1 = program("matmul_v1")
    t.assistant(
        "msg_44Write",
        [
            text("One thread per output cell, 16 x 16 blocks:"),
            tool_use("toolu_44Write", "Write", file_path=matmul, content=m1),
        ],
        stop_reason="tool_use",
    )
    t.result(
        "toolu_44Write",
        f"File created successfully at: {matmul}",
        {"type": "create", "filePath": matmul, "content": m1, "structuredPatch": []},
    )
    t.user("Wrong results for n = 1000, and memcheck shows writes out of bounds.")
    m2 = program("matmul_v2")
    old, new = changed_lines(m1, m2)
    t.assistant(
        "msg_45Guard",
        [
            text("63 blocks of 16 cover 1,008 rows and columns: the last threads must stop."),
            tool_use("toolu_45Edit", "Edit", file_path=matmul, old_string=old, new_string=new),
        ],
        stop_reason="tool_use",
    )
    t.result("toolu_45Edit", f"The file {matmul} has been updated.")
    t.user("Correct, but ncu says it is memory bound: every thread reads its row and column.")
    m3 = program("matmul_v3")
    kernel_old, kernel_new = changed_lines(m2.split("kernel = ")[0], m3.split("kernel = ")[0])
    edits = [
        {"old_string": kernel_old, "new_string": kernel_new, "replace_all": False},
        {
            "old_string": 'cupy.RawKernel(SOURCE, "matmul_naive")',
            "new_string": 'cupy.RawKernel(SOURCE, "matmul_tiled")',
            "replace_all": False,
        },
    ]
    t.assistant(
        "msg_46Tile",
        [
            text("Stage 16 x 16 tiles of a and b in shared memory: each value is read once."),
            tool_use("toolu_46Multi", "MultiEdit", file_path=matmul, edits=edits),
        ],
        stop_reason="tool_use",
    )
    t.result("toolu_46Multi", f"Applied 2 edits to {matmul}.")
    path = f"{CWD}/kernels/scale.cu"
    t.assistant(
        "msg_47Scale",
        [
            text("And the scaling kernel you asked about, as a .cu file:"),
            tool_use("toolu_47Write", "Write", file_path=path, content=SCALE_CU),
        ],
        stop_reason="tool_use",
    )
    t.result("toolu_47Write", f"File created successfully at: {path}")
    t.assistant("msg_48Done", [text("The tiled kernel reads each input value once per tile.")])
    return t


SHOWCASE = HERE.parent.parent.parent / "fixtures" / "triton_cuda" / "session.jsonl"


def main() -> None:
    for build in (matmul_review, softmax_js, matmul_html, triton_cuda):
        path = build().write()
        print(f"wrote {path.relative_to(HERE.parent.parent.parent)}")
    # The second showcase (manage.py load_gpu_showcase) is this session under its title.
    showcase = triton_cuda()
    showcase.plain(
        {
            "type": "custom-title",
            "customTitle": "Triton and CUDA with Claude",
            "sessionId": showcase.session,
        }
    )
    with SHOWCASE.open("w", encoding="utf-8") as handle:
        for line in showcase.lines:
            handle.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"wrote {SHOWCASE.relative_to(HERE.parent.parent.parent)}")


if __name__ == "__main__":
    main()
