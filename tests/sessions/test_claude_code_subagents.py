"""Sub-agent-heavy sessions read as their main thread (issue 26): each sub-agent's
conversation folded under its call, with its type, model, calls and duration; the page
counts main-line turns, so 200 sub-agent turns never push the main thread away; views
that show prompts only, or leave out tools or sub-agents; tool calls shown as tables,
reports as Markdown, file reads numbered."""

from __future__ import annotations

import re

from django.test import override_settings

from tests.sessions.importing import ImportingTestCase
from tests.sessions.transcripts.build import AgentTranscript, Transcript, text, tool_use

AGENTS = 4
CALLS = 25  # each call is a turn, and each agent ends with its report: 4 × 26 turns
REPORT = "## Findings\n\n- `matmul.wgsl` dispatches 8×8 groups\n- the others agree"


def busy_session() -> tuple[Transcript, list[AgentTranscript]]:
    t = Transcript("busy")
    t.user("Audit every kernel, one sub-agent per folder.", parent=None)
    agents = []
    for a in range(AGENTS):
        call = f"toolu_Task{a}"
        t.assistant(
            f"msg_M{a}",
            [
                tool_use(
                    call,
                    "Task",
                    description=f"Audit folder {a}",
                    prompt=f"Audit the kernels in folder {a}.",
                    subagent_type="Explore",
                )
            ],
            "tool_use",
        )
        agent = AgentTranscript(t, f"a{a}b2c3d")
        agent.user(f"Audit the kernels in folder {a}.", parent=None)
        for c in range(CALLS):
            tool = f"toolu_A{a}C{c}"
            agent.assistant(f"msg_A{a}C{c}", [tool_use(tool, "Grep", pattern=f"k{c}")], "tool_use")
            agent.result(tool, f"kernels/{a}/k{c}.wgsl:1:fn main() {{}}")
        agent.assistant(f"msg_A{a}R", [text(REPORT)])
        agent.clock = t.clock = agent.clock
        detail = {"status": "completed", "agentId": agent.agent_id, "totalDurationMs": 83_000}
        t.result(call, [text(f"{REPORT}\nagentId: {agent.agent_id} (use SendMessage)")], detail)
        t.assistant(f"msg_M{a}B", [text(f"Folder {a} is done.")])
        agents.append(agent)
    # Claude Code's warm-up call before the first prompt: not a sub-agent of the session.
    warm = AgentTranscript(t, "a9warm0")
    warm.user("Warmup", parent=None)
    warm.assistant("msg_W1", [text("I'm ready to help.")])
    agents.append(warm)
    t.user("Thanks. Which one is wrong?")
    t.assistant("msg_END", [text("Only `matmul.wgsl`: its dispatch is 8×8.")])
    return t, agents


# Twenty turns a page: 115 turns counted alike would make six pages.
@override_settings(TURNS_PER_PAGE=20)
class FoldedSubagentsTestCase(ImportingTestCase):
    def setUp(self) -> None:
        super().setUp()
        main, agents = busy_session()
        self.write("busy.jsonl", main)
        (self.tmp / "busy" / "subagents").mkdir(parents=True)
        for agent in agents:
            self.write(f"busy/subagents/agent-{agent.agent_id}.jsonl", agent)
        self.out = self.run_import(self.tmp / "busy")
        self.imported = self.session()
        self.imported.publish()
        self.url = self.imported.get_absolute_url()

    def test_the_main_thread_stays_on_one_page_each_agent_folded_under_its_call(self) -> None:
        nested = self.imported.turns.filter(meta__has_key="depth", hidden=False)
        self.assertEqual(nested.count(), AGENTS * (CALLS + 1))
        page = self.client.get(self.url).content.decode()
        # Every main-line turn is on the first page, the last reply too.
        self.assertTrue("Only <code>matmul.wgsl</code>: its dispatch is 8×8." in page)
        self.assertFalse('class="pager"' in page)
        calls = self.imported.turns.filter(meta__tool="Task").order_by("number")
        self.assertEqual(calls.count(), AGENTS)
        for call in calls:
            article = page.split(f'id="turn-{call.number}"')[1]
            fold = article.split('<details class="subagent">')[1].split(
                "</details>\n  \n</article>"
            )[0]
            summary = re.search(r"<summary>(.*?)</summary>", fold)[1]
            self.assertEqual(
                summary,
                f"Sub-agent · Explore · claude-opus-4-6 · {CALLS} calls · {CALLS + 1} turns"
                " · 1 min 23 s",
            )
            # Folded by default: the page opens on the main thread.
            self.assertNotIn('<details class="subagent" open', article[:200])
            first_nested = call.number + 1
            self.assertIn(f'id="turn-{first_nested}"', fold)
        # The report reads as Markdown, without the tail meant for the main agent.
        html = calls.first().html
        self.assertIn("<h2>Findings</h2>", html)
        self.assertNotIn("agentId:", html)
        self.assertNotIn("I&#x27;m ready to help", page)
        self.assertIn("2 turns of Claude Code's own agents (compaction, warm-up)", self.out)

    def test_a_sub_agents_turn_opens_the_page_of_its_call(self) -> None:
        last = self.imported.turns.filter(meta__has_key="depth", hidden=False).last()
        response = self.client.get(self.url, {"turn": last.number})
        self.assertContains(response, f'id="turn-{last.number}"')

    def test_views_show_prompts_only_or_leave_out_tools_or_sub_agents(self) -> None:
        def numbers(show: str) -> list[int]:
            page = self.client.get(self.url, {"show": show}).content.decode()
            return [int(n) for n in re.findall(r'<article class="turn[^"]*" id="turn-(\d+)"', page)]

        turns = self.imported.turns.filter(hidden=False)
        learner = list(turns.filter(role="learner").values_list("number", flat=True))
        self.assertEqual(numbers("prompts"), learner)
        tools = set(turns.filter(role="tool").values_list("number", flat=True))
        nested = set(turns.filter(meta__has_key="depth").values_list("number", flat=True))
        self.assertFalse(set(numbers("no-tools")) & (tools | nested))
        without_agents = numbers("no-agents")
        self.assertFalse(set(without_agents) & nested)
        self.assertTrue(set(without_agents) & tools)
        # Links that work without a script, the current one marked.
        page = self.client.get(self.url, {"show": "prompts"}).content.decode()
        self.assertIn(
            f'<a href="{self.url}?show=prompts" aria-current="page">Prompts only</a>', page
        )
        # Anything else is the whole session.
        self.assertEqual(numbers("nonsense"), numbers(""))


def tool_rendering_session() -> Transcript:
    t = Transcript("tools")
    t.user("Look at the kernel and file an issue.", parent=None)
    t.assistant(
        "msg_T1", [tool_use("toolu_R1", "Read", file_path="/srv/k/add.wgsl", offset=12)], "tool_use"
    )
    t.result("toolu_R1", "    12→@compute @workgroup_size(64)\n    13→fn main() {}")
    params = {
        "owner": "alice",
        "title": "Dispatch | size is wrong",
        "body": "Line one\nLine two",
        "labels": ["bug", "wgsl"],
    }
    t.assistant("msg_T2", [tool_use("toolu_M1", "mcp__github__create_issue", **params)], "tool_use")
    t.result("toolu_M1", "Created issue #7")
    t.assistant("msg_T3", [text("Filed.")])
    return t


class ToolRenderingTestCase(ImportingTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.run_import(self.write("tools.jsonl", tool_rendering_session()))
        self.read, self.mcp = self.session().turns.filter(role="tool").order_by("number")

    def test_a_file_read_shows_line_numbers_and_highlighting(self) -> None:
        html = self.read.html
        self.assertIn('<pre class="highlight lang-wgsl">', html)
        self.assertIn('<span class="linenos">12</span>', html)
        self.assertIn('<span class="linenos">13</span>', html)
        self.assertNotIn("→", html)

    def test_parameters_are_a_table_long_values_below_it(self) -> None:
        html = self.mcp.html
        self.assertIn("<table>", html)
        self.assertIn("<td><code>owner</code></td>", html)
        self.assertIn("<td><code>alice</code></td>", html)
        self.assertIn("<code>Dispatch | size is wrong</code>", html)
        # The multi-line and nested values get blocks of their own under the table.
        self.assertIn("<strong>body</strong>", html)
        self.assertIn("Line one\nLine two", html)
        self.assertIn("<strong>labels</strong>", html)
        self.assertNotIn('{"owner"', self.mcp.content)


class LoneSubagentTestCase(ImportingTestCase):
    def test_a_sub_agent_file_imported_alone_is_imported(self) -> None:
        _main, agents = busy_session()
        agent = agents[0]
        out = self.run_import(self.write(f"agent-{agent.agent_id}.jsonl", agent))
        self.assertIn("Created session", out)
        turns = self.turns()
        self.assertEqual(turns[0].kind, "agent_prompt")
        self.assertIn("Audit the kernels in folder 0.", turns[0].content)


class UsageTestCase(ImportingTestCase):
    def test_tokens_and_durations_are_shown_where_the_transcript_has_them(self) -> None:
        t = Transcript("usage")
        t.user("Why is my kernel slow?", parent=None)
        t.assistant("msg_U1", [tool_use("toolu_U1", "Bash", command="make bench")], "tool_use")
        t.result("toolu_U1", "12.5 ms", {"stdout": "12.5 ms", "durationMs": 2400})
        t.assistant("msg_U2", [text("Uncoalesced reads.")])
        t.system("turn_duration", durationMs=95_000)
        self.run_import(self.write("usage.jsonl", t))
        prompt, call, reply = self.turns()
        self.assertEqual(prompt.meta["duration_ms"], 95_000)
        self.assertEqual(call.meta["duration_ms"], 2400)
        session = self.session()
        session.publish()
        page = self.client.get(session.get_absolute_url()).content.decode()
        turn = lambda n: page.split(f'id="turn-{n}"')[1].split("</header>")[0]  # noqa: E731
        self.assertIn(">1 min 35 s</span>", turn(prompt.number))
        self.assertIn(" · 2.4 s</span>", turn(call.number))  # its response had no text
        self.assertIn(">16,204 tokens in (15,000 cached) · 40 out</span>", turn(reply.number))


class LinkedByPromptTestCase(ImportingTestCase):
    def test_a_sub_agent_whose_first_line_names_its_call_is_folded_under_it(self) -> None:
        # Newer files: the agent's first line has a parentUuid (the call's line), and the
        # call's result does not say which agent answered.
        t = Transcript("linked")
        t.user("Check the dispatch sizes.", parent=None)
        call_line = t.assistant(
            "msg_L1",
            [tool_use("toolu_L1", "Task", prompt="Compare each workgroup size.")],
            "tool_use",
        )[-1]
        agent = AgentTranscript(t, "a7e7e7e")
        agent.user("Compare each workgroup size.", parent=call_line)
        agent.assistant("msg_LA", [text("They agree.")])
        t.result("toolu_L1", [text("They agree.")])
        t.assistant("msg_L2", [text("All good.")])
        self.write("linked.jsonl", t)
        (self.tmp / "linked" / "subagents").mkdir(parents=True)
        self.write("linked/subagents/agent-a7e7e7e.jsonl", agent)
        out = self.run_import(self.tmp / "linked")
        self.assertIn(
            "Sub-agents: 1 transcript(s) nested in their calls, 0 shown on their own", out
        )
        turns = self.turns()
        self.assertEqual(turns[-1].content, "All good.")
        self.assertEqual(turns[2].meta["call"], "toolu_L1")
