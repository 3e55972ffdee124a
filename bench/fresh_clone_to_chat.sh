#!/bin/bash
# Fresh clone to a drawn chat (issue 49): `git clone` of this repository at COMMIT, an empty HOME (so empty pip and
# tokchat caches; pip's own configuration stays the machine's, in /etc), `python3 dev.py run` in a 120x36 tmux
# window with the interpreter's bytecode cache on, as a user has it; the clock stops when the model bar says
# "llama.cpp on CPU" (the chat drawn, its model loaded).  Run it with nothing else on the machine, once per commit:
#
#     bench/fresh_clone_to_chat.sh before b98a51d    # then: bench/fresh_clone_to_chat.sh after HEAD
#
# Writes /tmp/tokchat-fresh/NAME/{result.txt,screen.txt}; the clone and its HOME stay there (delete them after).
set -u
name=$1; commit=$2
repo=$(cd "$(dirname "$0")/.." && pwd)
py=$(python3 -c 'import sys; print(sys.executable)')  # the real interpreter: a pyenv shim looks in $HOME
base=/tmp/tokchat-fresh/$name
rm -rf "$base"; mkdir -p "$base/home"
git clone -q "$repo" "$base/repo" && git -C "$base/repo" checkout -q "$commit" || exit 1
sock=$base/tmux.sock
start=$(date +%s.%N)
tmux -S "$sock" new-session -d -s m -x 120 -y 36 \
  "env -u PYTHONDONTWRITEBYTECODE HOME=$base/home TERM=xterm-256color bash -c 'cd $base/repo && $py dev.py run; echo DEVPY-EXITED; sleep 600'"
while true; do
  screen=$(tmux -S "$sock" capture-pane -p -t m 2>/dev/null)
  now=$(date +%s.%N)
  if grep -q "llama.cpp on CPU" <<<"$screen"; then
    echo "$name $commit: chat drawn after $(python3 -c "print(round($now - $start, 1))") s" | tee "$base/result.txt"; break
  fi
  if grep -q "DEVPY-EXITED" <<<"$screen"; then echo "$name $commit: dev.py exited first" | tee "$base/result.txt"; break; fi
  sleep 1
done
echo "$screen" > "$base/screen.txt"
tmux -S "$sock" kill-server
