"""The Responses API's stream: ``response.created``, then per output item its ``added`` /
``delta`` / ``done`` events (``response.output_text.delta`` for text,
``response.function_call_arguments.delta`` for a call's arguments, in pieces as generated),
then ``response.completed`` (``response.incomplete`` when cut by ``max_output_tokens``)."""

from __future__ import annotations

import json
from typing import Any

from apps.gateway import responses_api as api
from apps.gateway import tool_calls
from apps.gateway.collect import Completion


def frame(event: dict[str, Any]) -> bytes:
    return (f"event: {event['type']}\ndata: "
            f"{json.dumps(event, separators=(',', ':'))}\n\n").encode()


class EventWriter:
    """Builds the events of one streamed response from the answer's text pieces."""

    def __init__(self, response_id: str, body: dict, chat: dict, reads_calls: bool) -> None:
        self.response_id, self.body, self.chat = response_id, body, chat
        self.parser = tool_calls.CallParser() if reads_calls else None
        self.items: list[dict] = []  # output items so far (the open one last)
        self.text: dict[str, str] = {}  # message item id -> its text
        self.calls: dict[int, int] = {}  # call index -> output index
        self.seq = 0

    def _event(self, kind: str, **fields: Any) -> bytes:
        self.seq += 1
        return frame({"type": kind, "sequence_number": self.seq, **fields})

    def created(self) -> list[bytes]:
        response = api.response_object(self.response_id, self.body, self.chat, output=[],
                                       result=None, status="in_progress")
        return [self._event("response.created", response=response),
                self._event("response.in_progress", response=response)]

    def piece(self, text: str) -> list[bytes]:
        """The events for one piece of the answer's text."""
        if self.parser is None:
            return self._text(text)
        return self._parsed(self.parser.feed(text))

    def _parsed(self, events: tool_calls.Events) -> list[bytes]:
        out = self._text(events.content) if events.content.strip() or self._open_message() \
            else []
        for call in events.started:
            out += self._close_open()
            item = api.call_item(api.new_id("fc"), call.id, call.name, "", "in_progress")
            self.calls[call.index] = len(self.items)
            self.items.append(item)
            out.append(self._event("response.output_item.added",
                                   output_index=len(self.items) - 1, item=item))
        for index, piece in events.arguments:
            at = self.calls[index]
            self.items[at]["arguments"] += piece
            out.append(self._event("response.function_call_arguments.delta",
                                   item_id=self.items[at]["id"], output_index=at, delta=piece))
        return out

    def _open_message(self) -> dict | None:
        last = self.items[-1] if self.items else None
        return last if last is not None and last["type"] == "message" and \
            last["status"] == "in_progress" else None

    def _text(self, text: str) -> list[bytes]:
        if not text:
            return []
        out, item = [], self._open_message()
        if item is None:
            out += self._close_open()
            item = api.message_item(api.new_id("msg"), "", "in_progress")
            item["content"] = []
            self.items.append(item)
            self.text[item["id"]] = ""
            where = {"item_id": item["id"], "output_index": len(self.items) - 1}
            out += [self._event("response.output_item.added", output_index=where["output_index"],
                                item=item),
                    self._event("response.content_part.added", **where, content_index=0,
                                part={"type": "output_text", "text": "", "annotations": []})]
        self.text[item["id"]] += text
        out.append(self._event("response.output_text.delta", item_id=item["id"],
                               output_index=len(self.items) - 1, content_index=0, delta=text,
                               logprobs=[]))
        return out

    def _close_open(self) -> list[bytes]:
        """Close the last item if it is still open."""
        if not self.items or self.items[-1]["status"] != "in_progress":
            return []
        at, item = len(self.items) - 1, self.items[-1]
        item["status"] = "completed"
        if item["type"] == "function_call":
            return [self._event("response.function_call_arguments.done", item_id=item["id"],
                                output_index=at, arguments=item["arguments"]),
                    self._event("response.output_item.done", output_index=at, item=item)]
        text = self.text[item["id"]]
        part = {"type": "output_text", "text": text, "annotations": []}
        item["content"] = [part]
        where = {"item_id": item["id"], "output_index": at, "content_index": 0}
        return [self._event("response.output_text.done", **where, text=text, logprobs=[]),
                self._event("response.content_part.done", **where, part=part),
                self._event("response.output_item.done", output_index=at, item=item)]

    def finish(self, result: Completion) -> tuple[list[bytes], dict]:
        """The closing events and the final response object."""
        out = self._parsed(self.parser.finish()) if self.parser is not None else []
        out += self._close_open()
        response = api.response_object(self.response_id, self.body, self.chat,
                                       output=self.items, result=result)
        kind = "response.completed" if response["status"] == "completed" \
            else "response.incomplete"
        out.append(self._event(kind, response=response))
        return out, response

    def error(self, body: dict[str, Any]) -> bytes:
        err = body.get("error", {})
        return self._event("error", code=err.get("code"), message=err.get("message"),
                           param=err.get("param"))
