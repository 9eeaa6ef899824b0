"""Claude Code transcripts become turns: merging, pairing, ordering, what is shown."""

from __future__ import annotations

from sessions.models import Session
from tests.sessions.importing import MATMUL, SOFTMAX, ImportingTestCase, tiny
from tests.sessions.transcripts.build import Transcript, text, tool_use


class TurnsTestCase(ImportingTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.out = self.run_import(MATMUL)
        self.all = self.turns()
        self.by_number = {turn.number: turn for turn in self.all}

    def test_it_maps_the_whole_transcript_to_turns(self) -> None:
        shape = [(t.role, t.kind) for t in self.all]
        self.assertEqual(
            shape,
            [
                ("system", "command"),
                ("system", "command_output"),
                ("learner", ""),
                ("tutor", "thinking"),
                ("tutor", ""),
                ("tool", "tool_call"),  # Read
                ("tool", "tool_call"),  # Grep
                ("tutor", ""),
                ("tool", "tool_call"),  # Edit
                ("tutor", ""),
                ("learner", ""),  # its response's empty thinking adds no turn
                ("tool", "tool_call"),  # Bash
                ("tutor", ""),
                ("tool", "tool_call"),  # Edit, reconstructed
                ("tutor", ""),
                ("tool", "tool_call"),  # Edit, rejected
                ("system", "interrupt"),
                ("learner", ""),
                ("tutor", ""),
                ("system", "raw"),  # unknown block
                ("system", "raw"),  # unknown line type with uuid
                ("system", "raw"),  # unknown line type without uuid
                ("system", "compact_boundary"),
                ("system", "compact_summary"),
                ("learner", ""),
                ("tutor", ""),
                ("tool", "tool_call"),  # Edit, unresolved
                ("tutor", ""),
                ("learner", ""),
                ("tool", "tool_call"),  # Task
                ("tool", "tool_call"),  # its sub-agent's Glob, nested
                ("tutor", ""),  # its sub-agent's answer, nested
                ("tutor", ""),
            ],
        )
        self.assertEqual([t.number for t in self.all], list(range(1, 34)))

    def test_it_merges_a_streamed_response_and_keeps_the_last_usage(self) -> None:
        # msg_01 came as four lines: thinking, text, two tool calls.
        answer = self.by_number[5]
        self.assertEqual(
            answer.content, "Let me look at the kernel file and at how you dispatch it."
        )
        self.assertEqual(answer.meta["message_id"], "msg_01MatmulReview")
        self.assertEqual(answer.meta["lines"], 4)
        # The last line's usage, not a sum over the four.
        self.assertEqual(answer.meta["usage"]["output_tokens"], 160)
        self.assertEqual(answer.meta["usage"]["input_tokens"], 7)
        self.assertEqual(answer.meta["model"], "claude-opus-4-6")
        self.assertEqual(
            sum(1 for t in self.all if t.meta.get("message_id") == answer.meta["message_id"]), 1
        )

    def test_it_pairs_tool_results_by_id_not_position(self) -> None:
        read, grep = self.by_number[6], self.by_number[7]
        self.assertEqual((read.meta["tool"], grep.meta["tool"]), ("Read", "Grep"))
        self.assertEqual(read.meta["tool_use_id"], "toolu_01Read")
        # Read's result came after Grep's, on a side branch of the graph.
        self.assertIn("@compute @workgroup_size(8, 8)", read.content)
        self.assertIn("dispatchWorkgroups(Math.ceil(n / 16)", grep.content)
        self.assertNotIn("dispatchWorkgroups", read.content)
        self.assertEqual(read.meta["summary"], "Read kernels/matmul.wgsl")
        self.assertFalse(read.meta["is_error"])

    def test_it_keeps_thinking_as_collapsed_labelled_turns(self) -> None:
        thought = self.by_number[4]
        self.assertTrue(thought.is_collapsed)
        self.assertIn("dispatch size probably", thought.content)
        # msg_04's thinking was empty (not returned by the API): no turn for it.
        self.assertEqual(self.by_number[12].meta["tool"], "Bash")
        self.assertFalse(any("not recorded" in t.content for t in self.all))
        self.assertIn("1 empty thinking block", self.out)
        r = self.client.get("/s/matmul-the-dispatch-and-bounds-bugs/")
        self.assertEqual(r.status_code, 404)  # private until published
        self.client.force_login(self.charlie)
        r = self.client.get("/s/matmul-the-dispatch-and-bounds-bugs/")
        article = r.content.decode().split('id="turn-4"')[1].split("</article>")[0]
        self.assertIn('<span class="role">Thinking</span>', article)
        self.assertIn("<details", article)
        self.assertIn("<summary>The dispatch size probably", article)

    def test_harness_lines_are_not_learner_turns(self) -> None:
        learners = [t.content for t in self.all if t.role == "learner"]
        self.assertEqual(len(learners), 5)
        for content in learners:
            self.assertNotIn("Caveat:", content)
            self.assertNotIn("<command-name>", content)
            self.assertNotIn("Request interrupted", content)
            self.assertNotIn("This session is being continued", content)
        self.assertEqual(self.by_number[1].content, "Ran `/model opus`")
        self.assertIn("Set model to opus", self.by_number[2].content)
        self.assertEqual(self.by_number[17].content, "*Interrupted by the user.*")

    def test_a_compaction_is_a_divider_and_a_collapsed_summary(self) -> None:
        boundary, summary = self.by_number[23], self.by_number[24]
        self.assertEqual(
            boundary.content, "*Conversation compacted (auto, 174,366 tokens before).*"
        )
        self.assertTrue(summary.is_collapsed)
        self.assertEqual(summary.role, "system")
        self.assertIn("Primary Request and Intent", summary.content)
        # The conversation continues across the boundary (logicalParentUuid).
        self.assertEqual(
            self.by_number[25].content,
            "Can you make the inner loop read b with a stride-1 pattern?",
        )

    def test_unknown_lines_and_blocks_are_kept_raw(self) -> None:
        block, line, uuidless = self.by_number[20], self.by_number[21], self.by_number[22]
        self.assertIn('"server_tool_use"', block.meta["summary"])
        self.assertIn('```json\n{\n  "type": "server_tool_use"', block.content)
        self.assertIn('"label": "guard explained"', line.content)
        self.assertIn("Line 34", uuidless.meta["summary"])
        self.assertIn('"events": 3', uuidless.content)
        for turn in (block, line, uuidless):
            self.assertTrue(turn.is_collapsed)

    def test_a_sub_agent_is_nested_in_its_call(self) -> None:
        task, glob, answer = self.by_number[30], self.by_number[31], self.by_number[32]
        self.assertEqual(task.meta["tool"], "Task")
        self.assertTrue(task.meta["subagent"])
        self.assertIn("*The sub-agent's conversation: turns 31–32, below.*", task.content)
        # Its whole conversation follows, each turn folded and marked as the agent's.
        self.assertEqual(glob.meta["tool"], "Glob")
        self.assertIn("kernels/matmul.wgsl\nkernels/reduce.wgsl", glob.content)
        self.assertIn("reduce.wgsl uses 256", answer.content)
        for turn in (glob, answer):
            self.assertEqual(turn.meta["agent"], "a7f3c2e")
            self.assertEqual(turn.meta["call"], "toolu_10Task")
            self.assertEqual(turn.meta["depth"], 1)
            self.assertTrue(turn.is_collapsed)
        self.assertEqual(answer.meta["model"], "claude-haiku-4-5")
        # The sub-agent's own prompt is not a learner turn of this session.
        self.assertFalse(any("Look at every" in t.content for t in self.all if t.role == "learner"))

    def test_the_custom_title_wins_and_details_are_kept(self) -> None:
        session = self.session()
        self.assertEqual(session.title, "Matmul: the dispatch and bounds bugs")
        self.assertEqual(session.slug, "matmul-the-dispatch-and-bounds-bugs")
        self.assertEqual(session.source, "imported")
        self.assertEqual(session.visibility, "private")
        self.assertEqual(session.tutor_model, "claude-opus-4-6")
        self.assertEqual(session.source_key, "a27be537-5932-5253-b130-f7ccbd6f62d5")
        self.assertEqual(session.created.isoformat(), "2026-05-02T10:00:03+00:00")
        self.assertEqual(self.by_number[3].meta["source_id"], self.by_number[3].meta["uuid"])

    def test_a_broken_image_is_noted_in_its_turn(self) -> None:
        self.assertIn("*[An image was not kept: not valid base64.]*", self.by_number[11].content)
        self.assertNotIn("iVBORw0KGgo", self.by_number[11].content)


class ResumeAndRewindTestCase(ImportingTestCase):
    def test_a_resumed_session_is_deduplicated_and_a_rewind_noted(self) -> None:
        out = self.run_import(SOFTMAX)
        self.assertIn("Resumed session: 12 repeated lines", out)
        self.assertIn("1 abandoned attempt (rewinds) noted", out)
        turns = self.turns()
        self.assertEqual(len(turns), 11)
        contents = [t.content for t in turns]
        self.assertEqual(contents.count("Here it is, one template string per pass:"), 1)
        # The abandoned attempt is noted where it branched off, not mixed in.
        note = turns[4]
        self.assertEqual(note.kind, "branch")
        self.assertTrue(note.is_collapsed)
        self.assertIn("> Should I use atomics for the max?", note.content)
        self.assertFalse(any("atomic max for f32" in c for c in contents))
        self.assertEqual(turns[5].content, "Why does exp_sum subtract m[0] instead of m[id.x]?")
        # Lines after the resume carry on the same conversation.
        self.assertIn("normalise pass", turns[9].content)
        self.assertEqual(self.session().source_key, "433deb30-b11a-59d7-bbea-65e9b6411aa4")

    def test_a_legacy_summary_names_the_session(self) -> None:
        self.run_import(SOFTMAX)
        self.assertEqual(self.session().title, "Softmax in three WebGPU passes")

    def test_summaries_of_other_sessions_never_name_this_one(self) -> None:
        t = tiny()
        # Claude Code puts summaries of the project's other sessions at the top of a file.
        foreign = {"type": "summary", "summary": "Fix login redirect", "leafUuid": "elsewhere"}
        t.lines.insert(0, foreign)
        out = self.run_import(self.write("t.jsonl", t))
        session = self.session()
        self.assertEqual(session.title, "How do I declare a storage buffer in WGSL?")
        self.assertEqual(session.slug, "how-do-i-declare-a-storage-buffer-in-wgsl")
        self.assertIn("1 summary line(s) of other sessions of the project: not the title.", out)

    def test_the_last_prompt_record_picks_the_live_branch(self) -> None:
        t = tiny()
        target = t.last
        t.user("Actually, what about uniforms?")
        t.assistant("msg_T3", [text("Uniforms are small read-only values...")])
        # The learner rewound to `target` and closed Claude Code without a new prompt.
        t.plain({"type": "last-prompt", "leafUuid": target, "sessionId": t.session})
        self.run_import(self.write("t.jsonl", t))
        contents = [turn.content for turn in self.turns()]
        self.assertEqual(contents[-2], "Use `var<storage, read> a: array<f32>;`.")
        self.assertIn("> Actually, what about uniforms?", contents[-1])

    def test_a_last_prompt_record_followed_by_more_lines_is_stale(self) -> None:
        t = tiny()
        t.plain({"type": "last-prompt", "leafUuid": t.last, "sessionId": t.session})
        t.user("One more question: what is a workgroup?")
        self.run_import(self.write("t.jsonl", t))
        self.assertEqual(self.turns()[-1].content, "One more question: what is a workgroup?")


class TitleAndOrderTestCase(ImportingTestCase):
    def title_of(self, t: Transcript) -> str:
        Session.objects.all().delete()
        self.run_import(self.write("t.jsonl", t))
        return self.session().title

    def test_title_priority(self) -> None:
        t = tiny()
        self.assertEqual(self.title_of(t), "How do I declare a storage buffer in WGSL?")
        t.plain({"type": "summary", "summary": "Storage buffers", "leafUuid": t.last})
        self.assertEqual(self.title_of(t), "Storage buffers")
        t.plain({"type": "ai-title", "aiTitle": "Declaring buffers", "sessionId": t.session})
        t.plain(
            {"type": "ai-title", "aiTitle": "Declaring storage buffers", "sessionId": t.session}
        )
        self.assertEqual(self.title_of(t), "Declaring storage buffers")  # the last one wins
        t.plain({"type": "custom-title", "customTitle": "WGSL buffers 101", "sessionId": t.session})
        self.assertEqual(self.title_of(t), "WGSL buffers 101")

    def test_the_title_option_wins_over_all(self) -> None:
        self.run_import(self.write("t.jsonl", tiny()), "--title", "Mine")
        self.assertEqual(self.session().title, "Mine")

    def test_order_follows_the_parent_chain_not_the_file(self) -> None:
        t = tiny()
        t.lines[0], t.lines[2] = t.lines[2], t.lines[0]
        self.run_import(self.write("t.jsonl", t))
        turns = self.turns()
        self.assertEqual(turns[0].content, "How do I declare a storage buffer in WGSL?")
        self.assertEqual([turn.role for turn in turns], ["learner", "tutor", "tool", "tutor"])

    def test_roles(self) -> None:
        self.run_import(self.write("t.jsonl", tiny()))
        _, tutor, tool, reply = self.turns()
        self.assertEqual(tool.meta["summary"], "Bash ls kernels")
        self.assertIn("```bash\nls kernels\n```", tool.content)
        self.assertIn("**Result**\n\n```\nadd.wgsl\n```", tool.content)
        self.assertTrue(tool.is_collapsed)
        self.assertFalse(tutor.is_collapsed)
        self.assertEqual(reply.meta["usage"]["output_tokens"], 40)


class OddLinesTestCase(ImportingTestCase):
    def test_calls_without_results_and_results_without_calls(self) -> None:
        t = tiny()
        t.assistant("msg_X", [tool_use("toolu_lost", "Read", file_path="/tmp/x.wgsl")], "tool_use")
        t.result("toolu_gone", "result of a call lost to compaction")
        self.run_import(self.write("t.jsonl", t))
        turns = self.turns()
        call, orphan = turns[-2], turns[-1]
        self.assertTrue(call.meta["no_result"])
        self.assertIn("No result was recorded", call.content)
        self.assertEqual(call.meta["summary"], "Read tmp/x.wgsl · no result")
        self.assertIn("whose call is not in this transcript", orphan.content)
        self.assertIn("result of a call lost to compaction", orphan.content)

    def test_api_errors_synthetic_lines_and_steering(self) -> None:
        t = tiny()
        t.assistant(
            "msg_err",
            [text("API Error: 529 Overloaded")],
            isApiErrorMessage=True,
        )
        t.lines[-1]["message"]["model"] = "<synthetic>"
        t.assistant("msg_syn", [text("No response requested.")])
        t.lines[-1]["message"]["model"] = "<synthetic>"
        t.add(
            t.envelope(
                "attachment",
                t.last,
                attachment={"type": "queued_command", "prompt": "also check the bounds"},
            )
        )
        t.system("api_error", content="Retrying in 2s", retryInMs=2000)
        self.run_import(self.write("t.jsonl", t))
        tail = self.turns()[-3:]
        self.assertEqual(
            [(x.role, x.kind) for x in tail],
            [("system", "api_error"), ("learner", "steering"), ("system", "api_error")],
        )
        self.assertEqual(tail[0].content, "*API Error: 529 Overloaded*")
        self.assertFalse(any("No response requested" in x.content for x in self.turns()))

    def test_odd_shapes_do_not_crash(self) -> None:
        t = tiny()
        t.add(
            t.envelope(
                "user", t.last, message={"role": "user", "content": ["bare string", 7, None]}
            )
        )
        t.add(t.envelope("user", t.last, message="not a dict"))
        t.add(t.envelope("assistant", t.last, message={"id": 5, "content": {"odd": True}}))
        t.add(
            t.envelope(
                "user", t.last, message={"role": "user", "content": [{"type": "tool_result"}]}
            )
        )
        t.add(
            {
                "type": "user",
                "uuid": 12345,
                "parentUuid": t.last,
                "message": {"content": "uuid is a number"},
            }
        )
        t.add(
            t.envelope("system", t.last, subtype="informational", content="Auto-update available")
        )
        out = self.run_import(self.write("t.jsonl", t))
        self.assertIn("Created session", out)
        contents = [x.content for x in self.turns()]
        self.assertIn("bare string", contents)
        self.assertIn("Auto-update available", contents)
