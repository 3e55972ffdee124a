"""open_chat, the one way a chat opens: what it reports on the way, the context it gives the session.

The local chat runs the real engine (SmolLM2 through llama.cpp, in its own
process); the handed-in case uses a scripted backend, as the tests that
script replies do.
"""
from __future__ import annotations

from app.chat.open import open_chat
from app.settings.options import ChatOptions
from backends.scripted import ScriptedBackend


def test_a_local_chat_reports_its_steps_and_keeps_the_context_asked_for(smollm_path, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    steps: list[str] = []
    chat = open_chat(ChatOptions(model=str(smollm_path), ctx=300), progress=steps.append)
    try:
        name = smollm_path.name
        assert steps[0] == f"finding the model {smollm_path}"
        assert steps[1].startswith(f"reading the tokenizer from {name} (") and steps[1].endswith(" MiB)")
        assert steps[2].startswith(f"loading {name} (") and steps[2].endswith(" with backend auto")
        # llama.cpp rounds its context up to a multiple of 256; the chat keeps to the 300 asked for
        assert chat.backend.info.context_size >= 300 and chat.context_size == chat.session.context_size == 300
        assert chat.model_path == smollm_path and chat.session.backend is chat.backend
        assert chat.notices == [*([chat.template_notice] if chat.template_notice else []), *chat.info.notes]
        assert any(note.startswith("llama.cpp:") for note in chat.notices)
    finally:
        chat.backend.close()


def test_a_backend_handed_in_is_used_as_it_is(smollm_path):
    backend = ScriptedBackend([1], context_size=1024)
    backend.info.notes = ["the caller's own note"]
    chat = open_chat(ChatOptions(model=str(smollm_path), ctx=4096), backend=backend)
    assert chat.backend is backend and chat.session.backend is backend
    # never more than the backend holds; its notes are the caller's to show
    assert chat.context_size == 1024 and "the caller's own note" not in chat.notices
    assert open_chat(ChatOptions(model=str(smollm_path)), backend=backend).context_size == 1024
