"""What makes one session: slash commands as requests, a sub-agent's file alone, and a
session's folder with its sub-agents' files (issue 13, point 1)."""

from __future__ import annotations

import json

from sessions.models import Session
from tests.sessions.importing import ImportingTestCase
from tests.sessions.transcripts.build import AgentTranscript, Transcript, text, tool_use

ORCHESTRATE = (
    "<command-message>orchestrator</command-message>\n"
    "<command-name>/orchestrator</command-name>\n"
    "<command-args>plan the matmul lesson\nthen review kernels/matmul.wgsl</command-args>"
)


def slash_command_session() -> Transcript:
    t = Transcript("slash-only")
    t.user(ORCHESTRATE, parent=None)
    t.user([text("You are the orchestrator. Plan the lesson: ...")], isMeta=True)
    t.assistant("msg_O1", [text("Here is the plan for the matmul lesson.")])
    return t


def session_with_agent(
    agent_id: str = "a1b2c3d", tell_id: bool = True
) -> tuple[Transcript, AgentTranscript]:
    """A main transcript whose Task call started a sub-agent, and the sub-agent's lines."""
    t = Transcript("with-agent")
    t.user("Check every kernel for the dispatch bug.", parent=None)
    t.assistant(
        "msg_A1",
        [
            tool_use(
                "toolu_Task1",
                "Task",
                description="Check kernels",
                prompt="Compare each workgroup size with its dispatch.",
            )
        ],
        stop_reason="tool_use",
    )
    agent = AgentTranscript(t, agent_id)
    agent.user("Compare each workgroup size with its dispatch.", parent=None)
    agent.assistant(
        "msg_S1", [tool_use("toolu_S1", "Grep", pattern="workgroup_size")], stop_reason="tool_use"
    )
    agent.result("toolu_S1", "kernels/matmul.wgsl:6:@compute @workgroup_size(8, 8)")
    agent.assistant("msg_S2", [text("Only matmul.wgsl disagrees with its dispatch.")])
    detail = {"status": "completed", "agentId": agent_id} if tell_id else None
    tail = f"\nagentId: {agent_id} (use SendMessage to continue)" if tell_id else ""
    t.result("toolu_Task1", [text("Only matmul.wgsl disagrees." + tail)], detail)
    t.assistant("msg_A2", [text("Only `matmul.wgsl` has the bug.")])
    return t, agent


class SlashCommandTestCase(ImportingTestCase):
    def test_a_session_asked_for_by_a_slash_command_alone_is_imported(self) -> None:
        out = self.run_import(self.write("slash.jsonl", slash_command_session()))
        learner = self.session().turns.get(role="learner")
        self.assertEqual(
            learner.content, "/orchestrator plan the matmul lesson\nthen review kernels/matmul.wgsl"
        )
        self.assertEqual(learner.meta["command"], "/orchestrator")
        self.assertEqual(self.session().title, "/orchestrator plan the matmul lesson")
        # The command's expansion is the harness's, not the learner's.
        self.assertNotIn("You are the orchestrator", "".join(t.content for t in self.turns()))
        self.assertIn("Created session", out)

    def test_claude_codes_own_terminal_commands_stay_notes(self) -> None:
        t = Transcript("model-only")
        t.user(
            "<command-name>/model</command-name>\n<command-args>opus</command-args>", parent=None
        )
        t.user("<local-command-stdout>Set model to opus</local-command-stdout>")
        message = self.import_fails(self.write("model.jsonl", t))
        self.assertIn("no human prompt", message)


class SubagentFileTestCase(ImportingTestCase):
    def test_a_sub_agents_file_alone_is_its_own_session(self) -> None:
        main, agent = session_with_agent()
        folder = self.tmp / "with-agent" / "subagents"
        folder.mkdir(parents=True)
        path = self.write("with-agent/subagents/agent-a1b2c3d.jsonl", agent)
        (folder / "agent-a1b2c3d.meta.json").write_text(
            json.dumps(
                {"agentType": "Explore", "description": "Check kernels", "toolUseId": "toolu_Task1"}
            )
        )
        self.run_import(path)
        session = self.session()
        self.assertEqual(session.title, "Sub-agent: Check kernels")
        self.assertTrue(session.source_key.endswith("/agent-a1b2c3d"))
        first = session.turns.get(number=1)
        self.assertEqual((first.role, first.kind), ("tutor", "agent_prompt"))
        self.assertIn("Compare each workgroup size", first.content)
        self.assertTrue(session.turns.filter(meta__tool="Grep").exists())
        # The parent session is another recording: importing it makes a second session.
        self.run_import(self.write("with-agent.jsonl", main))
        self.assertEqual(Session.objects.count(), 2)


class SessionFolderTestCase(ImportingTestCase):
    def write_session(self, tell_id: bool = True, sidecar: bool = True) -> None:
        main, agent = session_with_agent(tell_id=tell_id)
        self.write("with-agent.jsonl", main)
        (self.tmp / "with-agent" / "subagents").mkdir(parents=True)
        self.write("with-agent/subagents/agent-a1b2c3d.jsonl", agent)
        if sidecar:
            meta = {
                "agentType": "Explore",
                "description": "Check kernels",
                "toolUseId": "toolu_Task1",
            }
            (self.tmp / "with-agent/subagents/agent-a1b2c3d.meta.json").write_text(json.dumps(meta))

    def assert_nested(self, out: str) -> None:
        call = self.session().turns.get(meta__tool="Task")
        self.assertTrue(call.meta.get("subagent"))
        self.assertIn("Grep", call.content + "".join(t.content for t in self.turns()))
        self.assertIn("Joined 1 sub-agent file", out)
        self.assertIn("subagents/agent-a1b2c3d.jsonl (lines 5–8)", out)
        self.assertIn("1 transcript(s) nested in their calls, 0 shown on their own", out)

    def test_a_session_folder_brings_its_sub_agents(self) -> None:
        self.write_session()
        self.assert_nested(self.run_import(self.tmp / "with-agent"))

    def test_the_main_file_brings_the_sub_agents_beside_it(self) -> None:
        self.write_session()
        self.assert_nested(self.run_import(self.tmp / "with-agent.jsonl"))

    def test_the_sidecar_links_a_call_whose_result_names_no_agent(self) -> None:
        self.write_session(tell_id=False)
        self.assert_nested(self.run_import(self.tmp / "with-agent.jsonl"))

    def test_older_sub_agent_files_beside_the_session_are_joined_by_session_id(self) -> None:
        main, agent = session_with_agent()
        self.write("with-agent.jsonl", main)
        self.write("agent-a1b2c3d.jsonl", agent)
        other = AgentTranscript(Transcript("someone-else"), "ffff000")
        other.user("Unrelated.", parent=None)
        self.write("agent-ffff000.jsonl", other)
        out = self.run_import(self.tmp / "with-agent.jsonl")
        self.assertIn("Joined 1 sub-agent file", out)
        self.assertNotIn("agent-ffff000", out)

    def test_a_folder_of_several_sessions_asks_for_one(self) -> None:
        self.write("one.jsonl", slash_command_session())
        self.write("two.jsonl", slash_command_session())
        message = self.import_fails(self.tmp)
        self.assertIn("holds 2 session transcripts", message)


class LostCompactionParentTestCase(ImportingTestCase):
    def test_a_compaction_whose_logical_parent_is_missing_continues_the_conversation(self) -> None:
        t = Transcript("lost-parent")
        t.user("Write a reduction kernel.", parent=None)
        t.assistant("msg_L1", [text("Here is a first version.")])
        t.system(
            "compact_boundary",
            parent=None,
            logicalParentUuid="not-in-this-file",
            content="Conversation compacted",
            compactMetadata={"trigger": "auto", "preTokens": 170000},
        )
        t.user("This session is being continued ...", isCompactSummary=True)
        t.assistant("msg_L2", [text("Continuing: the tree reduction is next.")])
        out = self.run_import(self.write("lost.jsonl", t))
        contents = [turn.content for turn in self.turns()]
        self.assertIn("Continuing: the tree reduction is next.", contents)
        self.assertIn("Here is a first version.", contents)
        self.assertNotIn("unconnected", out)


class ProgressLinesTestCase(ImportingTestCase):
    def with_progress(self, echo_the_call: bool = False):
        """The session with its sub-agent's messages as progress lines of the Task call;
        echo_the_call: the Task call itself among them too (a call inside its own
        conversation)."""
        main, agent = session_with_agent()
        task_result = next(i for i, line in enumerate(main.lines) if line.get("toolUseResult"))
        parent = main.lines[task_result - 1]["uuid"]
        echoed = [main.lines[task_result - 1]] if echo_the_call else []
        progress = []
        for k, line in enumerate([*agent.lines, *echoed]):
            message = {key: line[key] for key in ("type", "message", "uuid", "timestamp")}
            if "toolUseResult" in line:
                message["toolUseResult"] = line["toolUseResult"]
            progress.append(
                main.envelope(
                    "progress",
                    parent,
                    data={"type": "agent_progress", "message": message, "prompt": "…"},
                    toolUseID=f"agent_msg_{k}",
                    parentToolUseID="toolu_Task1",
                    uuid=f"progress-{k}",
                    timestamp=line["timestamp"],
                )
            )
            parent = f"progress-{k}"
        main.lines[task_result:task_result] = progress
        return main

    def test_a_call_inside_its_own_progress_is_shown_once(self) -> None:
        out = self.run_import(self.write("with-agent.jsonl", self.with_progress(True)))
        self.assertIn("1 rebuilt from progress lines", out)
        turns = self.turns()
        # The call, and its echo inside the conversation, which is not nested again.
        tasks = [t.meta.get("depth") for t in turns if t.meta.get("tool") == "Task"]
        self.assertEqual(tasks, [None, 1])
        self.assertEqual([t.number for t in turns if (t.meta.get("depth") or 0) > 1], [])

    def test_a_sub_agent_known_only_from_progress_lines_is_nested_whole(self) -> None:
        """Claude Code 2.1 echoes a sub-agent's messages into the main file as progress
        lines (agent_progress) under the call's id: without its own file, they are it."""
        main = self.with_progress()
        out = self.run_import(self.write("with-agent.jsonl", main))
        turns = self.turns()
        self.assertEqual(
            [(t.role, t.kind, t.meta.get("depth")) for t in turns],
            [
                ("learner", "", None),
                ("tool", "tool_call", None),  # Task
                ("tool", "tool_call", 1),  # the sub-agent's Grep, with its result
                ("tutor", "", 1),
                ("tutor", "", None),
            ],
        )
        grep = turns[2]
        self.assertIn("kernels/matmul.wgsl:6:@compute @workgroup_size(8, 8)", grep.content)
        self.assertNotIn("no result", grep.meta["summary"])
        self.assertIn("1 rebuilt from progress lines", out)
        # The page shows them nested and folded.
        self.client.force_login(self.charlie)
        page = self.client.get(self.session().get_absolute_url()).content.decode()
        self.assertIn('class="turn role-tool kind-tool_call nested depth-1" id="turn-3"', page)
        self.assertIn("Tool · Grep · sub-agent", page)
