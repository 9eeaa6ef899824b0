"""Session files into the database: one neutral writer, a reader per format.

    files.py        the one way in (command and upload): tells the formats apart,
                    refuses what is too big or not text, imports it
    options.py      ImportOptions: what the person importing chose (title, slug,
                    visibility, redaction, owner), the same for every format
    specs.py        what an importer hands over (SessionSpec, TurnSpec, KernelSpec,
                    VersionSpec, StateSpec, FileSpec, ImageSpec) and ImportReport;
                    ImportProblem for a file that cannot be imported
    writer.py       write_session: all or nothing, a batch per commit
    batches.py      the batches it writes, and what a re-import keeps
    replace.py      a re-import's stand-in swapped in for the session it replaces
    kernelbin.py    kernelbin/1, our own export: read, validated whole, written
    claude_code/    Claude Code transcripts (JSON Lines), read in passes:
        layout.py       which files make one session: the main file and its sub-agents'
        lines.py        what a line is: kinds, content blocks, prompt text, timestamps
        index.py        pass 1: every line read once into a compact index
        plan.py         pass 1½: the main line, side branches, sub-agents, from the index
        source.py       the chosen lines read back by offset, scrubbed; tool results
        reader.py       pass 2: the walk, human lines and notes, and the report's notes
        responses.py    assistant lines merged into responses, emitted as turns
        tools.py        tool calls and results as turns; sub-agent transcripts
        decisions.py    the learner's answers and rejections inside tool results
        subagents.py    a sub-agent's whole conversation, nested under its call
        turns.py        turn numbering and kernel links; Markdown helpers
        kernels.py      kernel versions from edits, template strings and fenced blocks
        edits.py        what an Edit or MultiEdit call did to a file
    jsonl.py        JSON Lines of any size with bounded memory; several files read as one
    redact.py       secrets and home-directory names out of what is imported

Both readers depend on the writer, never on each other; nothing here depends on the
export (sessions.export), which writes kernelbin/1.
"""
