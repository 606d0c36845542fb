"""The tenant web app in headless Chromium against ``manage.py serve`` (embedded, as `make run`:
the bundled SmolLM2, the batch worker thread, SQLite): from the front page, sign in, chat two
turns over the session-cookie WebSocket, see the conversation survive a reload, a system prompt
change the (greedy) answer, a stored answer's markdown render with its script inert; create a
key, paste the getting-started curl and get an answer, use the key with the openai SDK, revoke
it and see the SDK get 401, upload a 20-line batch and watch its progress bar reach 100 %,
download the output; a member without the admin role cannot create keys, and neither another
member nor another tenant's user can open the conversation.

With ``LASER_SCREENSHOTS=1`` it also writes every page at desktop and phone width into
``docs/img/`` (CI leaves the tree alone).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import openai
import pytest

from tests.apps.batches.conftest import jsonl
from tests.apps.batches.live import LiveStack, embedded_env, tiny_line
from tests.apps.slo.test_dashboard_browser import CHROMIUM, FLAGS, _browser_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

IMG = Path(__file__).resolve().parents[3] / "docs" / "img"
PASSWORD = "correct-horse-battery"
DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
MARKDOWN_ID = "0b5e2c1e6a0d4f7e9c3b8a1d2e4f6a80"
MARKDOWN_ANSWER = ("# Capitals\n\n**Paris** is in `France`.\n\n```python\nprint('hi')\n```\n\n"
                   "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">"
                   "[link](javascript:window.pwned=3)")
USERS = f"""
from django.contrib.auth import get_user_model
from apps.slo.services import contracts_ensure_defaults
from apps.tenants.models import Tenant
from apps.tenants.services import member_add, tenant_create
from apps.web.models import Conversation
demo = Tenant.objects.get(slug="demo")
for name, role in (("ada", "admin"), ("bob", "member")):
    user = get_user_model().objects.create_user(name, password="{PASSWORD}")
    member_add(tenant=demo, user=user, role=role)
other = tenant_create(name="Other", slug="other")
contracts_ensure_defaults(tenant=other)
member_add(tenant=other, user=get_user_model().objects.create_user("eve", password="{PASSWORD}"))
Conversation.objects.create(
    id="{MARKDOWN_ID}", tenant=demo, user=get_user_model().objects.get(username="ada"),
    title="Markdown check", messages=[{{"role": "user", "content": "Format it"}},
                                      {{"role": "assistant", "content": {MARKDOWN_ANSWER!r}}}])
"""

# A page wider than the window scrolls sideways: name what sticks out (outside scroll boxes).
WIDER_THAN_SCREEN = """() => document.documentElement.scrollWidth <= window.innerWidth ? null
    : [...document.querySelectorAll('body *')]
      .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
      .slice(0, 8).map(e => `${e.tagName}.${e.className}`)"""


def _shoot(page, name: str) -> None:
    if os.environ.get("LASER_SCREENSHOTS") == "1":
        IMG.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMG / f"web-{name}.png"), full_page=True)


def _sign_in(browser, url: str, username: str, viewport: dict):
    page = browser.new_page(viewport=viewport)
    page.goto(f"{url}/")  # a visitor's front page, with the way in
    page.click("main a:has-text('Sign in')")
    page.wait_for_url("**/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/chat/")
    return page


def _chat_turn(page, text: str, n: int) -> dict:
    page.fill("#chat-input", text)
    page.keyboard.press("Enter")  # the keyboard path: Enter sends
    answer = page.locator("li.message.assistant").nth(n)
    answer.locator(".metrics").wait_for(timeout=120_000)
    answer.locator(".text.markdown").wait_for(timeout=30_000)  # rendered once complete
    return {"text": answer.locator(".text").inner_text(),
            "metrics": answer.locator(".metrics").text_content(),
            "demoted": answer.locator(".demoted").count()}


def _connected(page) -> None:
    page.wait_for_function("document.getElementById('chat-status').innerText"
                           ".startsWith('connected')", timeout=30_000)


def _chat(page) -> str:
    """The playground's checks; returns its "view code" curl for the next turn."""
    _connected(page)
    assert page.locator("#chat-tier option").all_inner_texts() == ["hot", "warm", "cold"]
    page.fill("#chat-max-tokens", "0")  # refused by name, never silently replaced
    page.fill("#chat-input", "Hi")
    page.keyboard.press("Enter")
    assert page.locator("#chat-max-tokens-error").inner_text().startswith("A whole number")
    assert page.locator("li.message").count() == 0
    page.fill("#chat-max-tokens", "24")
    page.fill("#chat-temperature", "0")  # greedy: the same question gives the same answer
    streamed = []  # the answer's text as the page showed it while streaming
    page.expose_function("seen", lambda text: streamed.append(text))
    page.evaluate("""() => new MutationObserver(() => {
        const t = document.querySelector('li.message.assistant:last-child .text');
        if (t) window.seen(t.textContent);
    }).observe(document.getElementById('messages'), {subtree: true, childList: true,
                                                     characterData: true})""")
    first = _chat_turn(page, "What is the capital of France?", 0)
    second = _chat_turn(page, "And of Italy?", 1)
    for turn in (first, second):
        assert turn["text"].strip()
        # hot, unless the scheduler demoted it on this busy machine: then the page says so
        served = turn["metrics"].split("TTFT")[0].strip()
        assert served == "served hot" or (served == "served warm" and turn["demoted"]), turn
        assert "TTFT" in turn["metrics"]
        assert "tokens/s" in turn["metrics"] and "contract p99" in turn["metrics"]
    raw = [t for t in streamed if t]
    grew = any(b != a and b.startswith(a) for a, b in zip(raw, raw[1:], strict=False))
    assert grew, "the answers appeared all at once, not streamed"
    assert page.locator("li.message").count() == 4
    _shoot(page, "chat")
    # the conversation is kept on the server: a reload shows it, with its SLO lines
    assert "?c=" in page.url and page.locator("#conversation-list li").count() == 2
    page.reload()
    page.locator("li.message.assistant .text.markdown").nth(1).wait_for(timeout=30_000)
    assert page.locator("li.message").count() == 4
    assert page.locator("li.message.assistant .text").first.inner_text() == first["text"]
    # a system prompt changes the answer to the same question (greedy both times)
    page.click("#chat-new")
    page.fill("#chat-system", "You are a pirate. Start every answer with 'Arr, matey!' "
                              "and talk like a pirate.")
    pirate = _chat_turn(page, "What is the capital of France?", 0)
    assert pirate["text"] != first["text"], (pirate, first)
    page.click("#chat-code")
    code = page.locator("#code-python").inner_text()
    assert "You are a pirate" in code and "temperature=0" in code and "LASER_API_KEY" in code
    curl = page.locator("#code-curl").inner_text()
    _json_mode(page)
    _markdown(page)
    return curl


def _json_mode(page) -> None:
    """JSON mode: the engine constrains the answer to JSON; the page shows it as a JSON block."""
    page.click("#chat-new")
    page.fill("#chat-system", "")
    page.check("#chat-json")
    page.fill("#chat-max-tokens", "64")
    turn = _chat_turn(page, "Give the capital of France as a JSON object.", 0)
    block = page.locator("li.message.assistant .text pre code.language-json")
    text = block.inner_text()
    print("JSON mode answer:", repr(text), turn["metrics"])
    assert text.lstrip().startswith(("{", "["))
    if "64 out" not in turn["metrics"]:  # finished, not cut at max tokens: it parses
        json.loads(text)


def _markdown(page) -> None:
    """A stored answer with markdown, a script tag, an onerror handler and a javascript: link
    renders as HTML with none of them able to run."""
    page.goto(page.url.split("?")[0] + f"?c={MARKDOWN_ID}")
    answer = page.locator("li.message.assistant .text.markdown")
    answer.wait_for(timeout=30_000)
    assert answer.locator("h1").inner_text() == "Capitals"
    assert answer.locator("strong").inner_text() == "Paris"
    assert answer.locator("pre code").inner_text().strip() == "print('hi')"
    assert page.locator("#messages script").count() == 0
    assert page.locator("#messages [onerror]").count() == 0
    assert page.locator("#messages a[href^='javascript']").count() == 0
    assert page.evaluate("() => window.pwned") is None
    _shoot(page, "chat-markdown")


def _isolated(browser, url: str, conversation: str) -> None:
    """Another member of the tenant and a user of another tenant cannot open it."""
    for user in ("bob", "eve"):
        page = _sign_in(browser, url, user, DESKTOP)
        page.goto(f"{url}/chat/?c={conversation}")
        page.locator("li.message .error").wait_for(timeout=30_000)
        assert "No such conversation" in page.locator("#messages").inner_text()
        assert conversation not in page.content().replace(f"?c={conversation}", "")
        page.close()


def _getting_started(page, url: str, secret: str) -> None:
    """The getting-started curl, pasted with the full key where the page shows its prefix,
    answers."""
    page.goto(f"{url}/start/")
    prefix = page.locator("#key-prefix").inner_text().removesuffix("…")
    assert secret.startswith(prefix)
    snippet = page.locator("#start-curl").inner_text().replace(f"{prefix}…", secret)
    done = subprocess.run(["bash", "-c", snippet], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["choices"][0]["message"]["content"], done.stdout
    _shoot(page, "start")


def _keys(page, url: str, view_code: str) -> None:
    page.click("nav >> text=API keys")
    page.fill("#key-name", "browser-test")
    page.select_option("#key-tier", "hot")
    page.click("#key-form button[type=submit]")
    secret = page.input_value("#new-secret")
    assert secret.startswith("lsr_") and secret in page.inner_text("#snippet-python")
    _shoot(page, "keys")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=secret, max_retries=0, timeout=120)
    reply = client.chat.completions.create(model="smollm2-135m-instruct", max_tokens=4,
                                           messages=[{"role": "user", "content": "Hi"}])
    assert reply.choices[0].message.content
    _getting_started(page, url, secret)
    # the chat's "view code" curl runs as shown, with the key in LASER_API_KEY
    done = subprocess.run(["bash", "-c", view_code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "LASER_API_KEY": secret})
    assert json.loads(done.stdout)["choices"][0]["message"]["content"], done.stdout + done.stderr
    page.goto(f"{url}/keys/")  # the list, without the secret
    assert secret not in page.content()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("tr:has-text('browser-test') button:has-text('Revoke')")
    page.wait_for_selector("tr:has-text('browser-test') td.status-revoked")
    with pytest.raises(openai.AuthenticationError) as refused:
        client.chat.completions.create(model="smollm2-135m-instruct", max_tokens=4,
                                       messages=[{"role": "user", "content": "Hi"}])
    assert refused.value.status_code == 401


def _bad_batch(page, tmp_path: Path) -> None:
    """A file with a truncated line and a non-JSON line: the upload answers with each bad
    line's number and reason, and the failed batch's row shows its reasons and error file."""
    bad = tmp_path / "bad.jsonl"
    good = [json.dumps(tiny_line(i)) for i in range(3)]
    bad.write_text("\n".join([good[0], good[1][:25], "not json", good[2]]) + "\n")
    page.set_input_files("#batch-file", str(bad))
    page.select_option("#batch-endpoint", "/v1/completions")
    page.click("#batch-form button[type=submit]")
    errors = page.locator("#batch-file-errors")
    errors.wait_for(timeout=30_000)
    items = errors.locator("ul.line-errors li").all_inner_texts()
    assert [x.split(":")[0] for x in items] == ["line 2", "line 3"], items
    assert all("Invalid JSON" in x for x in items), items
    row = page.locator("tr[data-batch]").first
    assert row.locator(".batch-status").inner_text().startswith("failed")
    assert "line 2: Invalid JSON" in row.locator("ul.reasons").inner_text()
    _shoot(page, "batch-errors")
    with page.expect_download() as download:
        row.locator("a.errors").click()
    rows = [json.loads(x) for x in Path(download.value.path()).read_text().splitlines()]
    assert [(r["error"]["line"], r["error"]["code"]) for r in rows] == [
        (2, "invalid_json_line"), (3, "invalid_json_line")]


def _batches(page, tmp_path: Path) -> None:
    page.click("nav >> text=Batches")
    _bad_batch(page, tmp_path)
    source = tmp_path / "requests.jsonl"
    source.write_bytes(jsonl([tiny_line(i) for i in range(20)]))
    page.set_input_files("#batch-file", str(source))
    page.select_option("#batch-endpoint", "/v1/completions")
    page.fill("#batch-window", "24h")
    page.click("#batch-form button[type=submit]")
    row = page.locator("tr[data-batch]").first
    # validated at upload: in progress from the first answer, not after a worker's turn
    assert row.locator(".batch-status").inner_text() in ("in_progress", "completed")
    seen = set()
    page.expose_function("progress", lambda value: seen.add(value))
    page.evaluate("""() => setInterval(() => window.progress(Number(
        document.querySelector('tr[data-batch] progress').value)), 100)""")
    row.locator("a.output").wait_for(timeout=150_000)  # no reload: the poll swaps the rows
    assert row.locator(".batch-status").inner_text() == "completed"
    assert row.locator("progress").get_attribute("value") == "100"
    assert "20 done, 0 failed of 20" in row.inner_text()
    assert min(seen) < 100, seen  # the bar moved on the page, without a reload
    _shoot(page, "batches")
    with page.expect_download() as download:
        row.locator("a.output").click()
    lines = Path(download.value.path()).read_text().splitlines()
    assert sorted(json.loads(x)["custom_id"] for x in lines) == sorted(
        f"doc-{i}" for i in range(20))


USAGE_KEY = """
from apps.slo.models import SLOContract
from apps.slo.services import contract_update
from apps.tenants.models import Tenant
from apps.tenants.services import api_key_create
demo = Tenant.objects.get(slug="demo")
contract_update(contract=SLOContract.objects.get(tenant=demo, tier="warm"), requests_per_min=2,
                beyond_plan=True)
print(api_key_create(tenant=demo, name="usage-run", default_tier="warm")[1])
"""
# Today's books of the demo tenant, straight from the request records (not the page's code).
USAGE_TRUTH = """
import datetime as dt, json
from apps.slo.models import RequestRecord
start = dt.datetime.combine(dt.datetime.now(dt.UTC).date(), dt.time(), tzinfo=dt.UTC)
books = RequestRecord.objects.filter(tenant__slug="demo", finished_at__gte=start)
served = [r for r in books.select_related("api_key") if r.outcome not in ("rejected_429",
                                                                          "rejected_400")]
keys = {}
for r in served:
    if r.api_key:
        keys.setdefault(r.api_key.prefix, [0, 0])
        keys[r.api_key.prefix][0] += 1
        keys[r.api_key.prefix][1] += r.prompt_tokens + r.completion_tokens
print(json.dumps({"requests": len(served),
                  "tokens": sum(r.prompt_tokens + r.completion_tokens for r in served),
                  "excess": sum(1 for r in served if not r.in_contract),
                  "rejected_429": books.filter(outcome="rejected_429").count(), "keys": keys}))
"""


def _usage(page, stack) -> None:
    """A scripted run (9 quick warm requests on a 2 rpm contract: some in contract, some excess,
    some 429), then today's usage page shows exactly what the request records hold."""
    secret = stack.manage("shell", "-c", USAGE_KEY).strip().splitlines()[-1]
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=secret, max_retries=0,
                           timeout=120)
    for _ in range(9):
        try:
            client.chat.completions.create(model="smollm2-135m-instruct", max_tokens=4,
                                           messages=[{"role": "user", "content": "Hi"}])
        except openai.RateLimitError:
            pass
    truth, before = None, {}
    while truth != before:  # until the server has booked every record
        before, truth = truth, json.loads(stack.manage("shell", "-c", USAGE_TRUTH).splitlines()[-1])
    assert truth["rejected_429"] >= 1 and truth["excess"] >= 1, truth
    page.goto(f"{stack.url}/usage/?days=1")
    shown = {name: int(page.locator(f"[data-total={name}]").inner_text())
             for name in ("requests", "tokens", "excess", "rejected_429")}
    assert shown == {k: truth[k] for k in shown}, (shown, truth)
    for prefix, (requests, tokens) in truth["keys"].items():
        row = page.locator(f"#usage-keys tr[data-key='{prefix}']")
        assert int(row.locator("[data-col=requests]").inner_text()) == requests
        assert int(row.locator("[data-col=tokens]").inner_text()) == tokens
    assert page.evaluate("() => Chart.getChart('chart-tokens').data.datasets.length") == 3
    _shoot(page, "usage")


def _member_reads_keys_only(browser, url: str) -> None:
    page = _sign_in(browser, url, "bob", DESKTOP)
    page.goto(f"{url}/keys/")
    assert page.locator("#read-only").is_visible()
    assert page.locator("#key-form").count() == 0
    assert page.locator("button:has-text('Revoke')").count() == 0
    status = page.evaluate("""async () => {
        const token = document.querySelector('input[name=csrfmiddlewaretoken]').value;
        const body = new URLSearchParams({csrfmiddlewaretoken: token, name: 'x',
                                          default_tier: 'hot'});
        return (await fetch('/keys/create', {method: 'POST', body})).status;
    }""")
    assert status == 403
    page.close()


def _phone_and_dashboard(browser, url: str) -> None:
    page = _sign_in(browser, url, "ada", PHONE)
    for name, path in (("chat", "/chat/"), ("keys", "/keys/"), ("batches", "/batches/"),
                       ("start", "/start/"), ("usage", "/usage/"),
                       ("guide", "/docs/batches.md")):
        page.goto(f"{url}{path}")
        if path == "/chat/" and os.environ.get("LASER_SCREENSHOTS") == "1":
            _connected(page)
            page.fill("#chat-max-tokens", "16")
            _chat_turn(page, "Name a colour.", 0)  # a conversation for the picture
        wide = page.evaluate(WIDER_THAN_SCREEN)
        assert not wide, f"{path} is wider than a phone: {wide}"
        if name != "guide":  # a guide is pages long: checked, not pictured
            _shoot(page, f"{name}-phone")
    page.goto(f"{url}/dashboard/?tenant=demo")
    page.wait_for_selector(".card")
    _shoot(page, "dashboard-phone")
    page.close()


def test_web_app_in_chromium(tmp_path):
    sync_playwright = _browser_or_skip()
    stack = LiveStack(tmp_path, embedded_env(tmp_path / "var", LASER_BATCH_CHUNK_LINES="4"))
    try:
        stack.manage("migrate", "--noinput")
        stack.manage("bootstrap_demo")
        stack.manage("shell", "-c", USERS)
        stack.server()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = _sign_in(browser, stack.url, "ada", DESKTOP)
            view_code = _chat(page)
            page.goto(f"{stack.url}/chat/")
            conversation = page.locator("#conversation-list li").first.get_attribute(
                "data-conversation")
            _isolated(browser, stack.url, conversation)
            _keys(page, stack.url, view_code)
            _batches(page, tmp_path)
            _usage(page, stack)
            page.click("nav >> text=Dashboard")
            page.wait_for_selector(".card")
            _shoot(page, "dashboard")
            _member_reads_keys_only(browser, stack.url)
            _phone_and_dashboard(browser, stack.url)
            browser.close()
    finally:
        stack.close()
