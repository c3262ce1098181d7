"""Multi-turn chat: the turns a conversation carries, and the server's memory of them.

Why a memory: turn n+1's prompt must start with turn n's prompt token for token (its passages
included) for the engine's prefix cache to serve the whole conversation so far. An OpenAI client
sends back only the questions and answers, so the server remembers, per answered turn, the
passages its prompt showed, keyed by a hash of the conversation up to that answer. A conversation
the server does not know (restarted, answer edited by the client) is still answered correctly:
its earlier turns are shown as bare questions and answers, only the reuse is lost.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from .answer import Answer, Passage


@dataclass
class ChatTurn:
    """One answered turn, as the next turn's prompt will show it (`prompt.Turn`)."""

    question: str
    answer: str
    passages: list[Passage] = field(default_factory=list)
    standalone_query: str = ""

    @classmethod
    def from_answer(cls, answer: Answer) -> ChatTurn:
        return cls(answer.question, answer.text, list(answer.passages),
                   answer.chat.get("standalone_query", answer.question))


Message = tuple[str, str]  # (role, text) of a user or assistant message


def conversation_key(messages: Sequence[Message]) -> str:
    """A digest of the conversation (user/assistant messages, whitespace-trimmed)."""
    body = json.dumps([(r, t.strip()) for r, t in messages], ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


def split_turns(messages: Sequence[Message]) -> tuple[list[tuple[int, str, str]], str]:
    """The answered turns before the last user message, as (index of the answer, question,
    answer), and that last question. A user message with no answer after it is left out of the
    history (it was never answered, so no prompt showed it)."""
    msgs = [(r, t) for r, t in messages if r in ("user", "assistant")]
    if not msgs or msgs[-1][0] != "user":
        raise ValueError("the last message must be the user's question")
    turns = [(i, msgs[i - 1][1], msgs[i][1]) for i in range(1, len(msgs) - 1)
             if msgs[i][0] == "assistant" and msgs[i - 1][0] == "user"]
    return turns, msgs[-1][1]


class ChatMemory:
    """LRU of answered turns keyed by the conversation up to their answer (`conversation_key`)."""

    def __init__(self, max_turns: int = 1024):
        self.max_turns = max_turns
        self._turns: OrderedDict[str, ChatTurn] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._turns)

    def history(self, messages: Sequence[Message]) -> tuple[list[ChatTurn], str]:
        """The earlier turns of a request's messages (with the passages their prompts showed
        where remembered) and the question to answer now."""
        msgs = [(r, t) for r, t in messages if r in ("user", "assistant")]
        turns, question = split_turns(msgs)
        out = []
        with self._lock:
            for i, q, a in turns:
                key = conversation_key(msgs[: i + 1])
                known = self._turns.get(key)
                if known is not None:
                    self._turns.move_to_end(key)
                    self.hits += 1
                    out.append(known)
                else:
                    self.misses += 1
                    out.append(ChatTurn(q, a))
        return out, question

    def remember(self, messages: Sequence[Message], answer: Answer) -> None:
        """Record the turn `answer` completes: `messages` end with its question."""
        msgs = [(r, t) for r, t in messages if r in ("user", "assistant")]
        key = conversation_key([*msgs, ("assistant", answer.text)])
        turn = ChatTurn.from_answer(answer)
        turn.question = msgs[-1][1]
        with self._lock:
            self._turns[key] = turn
            self._turns.move_to_end(key)
            while len(self._turns) > self.max_turns:
                self._turns.popitem(last=False)
