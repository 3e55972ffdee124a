"""A bracketed paste through a real terminal (issue 27, item 8): tmux pastes, the app reads.

The app runs as ``run_tui`` runs it (the paste-safe parser installed, the
real Linux driver reading the terminal), on a scripted backend so no model
has to load.  tmux's ``paste-buffer -p`` wraps the text in the bracketed
paste markers, exactly as a terminal does for a user's paste.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from support.tmux import ROOT, Tmux

from app.history.store import ChatStore

#: the chat on a scripted backend, started the way run_tui starts it; the store is the test's own
APP = textwrap.dedent("""
    import sys
    from pathlib import Path
    from app.settings.options import ChatOptions
    from app.history.store import ChatStore
    from app.tui import exit_status
    from app.tui.app import ChatApp
    from app.tui.loader import scripted_loader
    from app.tui.paste import use_paste_safe_parser

    model, db = Path(sys.argv[1]), Path(sys.argv[2])
    use_paste_safe_parser()
    app = ChatApp(ChatOptions(model=str(model)), loader=scripted_loader(model, ["ok"]), store=ChatStore(db))
    app.run()
    sys.exit(exit_status(app))
""")


def test_a_pasted_escape_sequence_arrives_whole_in_order_and_is_not_sent(tmp_path, smollm_path):
    script = tmp_path / "chat.py"
    script.write_text(APP, encoding="utf-8")
    tmux = Tmux(tmp_path)
    env = {**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(ROOT),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "TOKCHAT_DATA_DIR": str(tmp_path / "data")}
    command = f"{sys.executable} {script} {smollm_path} {tmp_path / 'history.sqlite3'}; echo EXITED $?; sleep 30"
    subprocess.run(["tmux", "-S", tmux.socket, "new-session", "-d", "-s", tmux.name, "-x", "100", "-y", "30",
                    command], check=True, env=env, cwd=tmp_path)
    try:
        tmux.wait(lambda s: "scripted" in s and "ctx" in s, 60, "the scripted model to load")
        tmux.run("set-buffer", "-b", "p", "abc \x1b[31mred\x1b[0m xyz")
        tmux.run("paste-buffer", "-p", "-b", "p", "-t", tmux.name)
        screen = tmux.wait(lambda s: "xyz" in s, 10, "the paste in the prompt box")
        assert "abc \\x1b[31mred\\x1b[0m xyz" in screen  # in order, the escapes drawn inert
        tmux.run("set-buffer", "-b", "q", " start \x1b]0;TITLE\x07 end\n")
        tmux.run("paste-buffer", "-p", "-b", "q", "-t", tmux.name)
        screen = tmux.wait(lambda s: " end" in s, 10, "the second paste")
        assert "start \\x1b]0;TITLE\\x07 end" in screen
        assert "Editing the last prompt" not in screen and "No prompt to edit" not in screen  # BEL is no Ctrl+G
        tmux.keys("C-q")
        screen = tmux.wait(lambda s: "EXITED" in s, 20, "the app to quit")
        assert "EXITED 0" in screen
    finally:
        tmux.kill()
    with ChatStore(tmp_path / "history.sqlite3") as store:
        assert store.list_conversations() == []  # the paste's trailing newline sent nothing
