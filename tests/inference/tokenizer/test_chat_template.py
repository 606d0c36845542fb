"""Chat templates render like transformers does, inside a sandbox."""

from __future__ import annotations

import pytest

from inference.tokenizer import CHATML, ChatTemplate, ChatTemplateError

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_chatml_with_generation_prompt():
    text = ChatTemplate(CHATML).render(MSGS)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\n")
    assert not ChatTemplate(None).render(MSGS, add_generation_prompt=False).endswith("assistant\n")


def test_bos_token_raise_exception_and_extra_context():
    src = ("{{ bos_token }}{% if messages[0]['role'] != 'user' %}"
           "{{ raise_exception('first message must be the user') }}{% endif %}"
           "{{ messages[0]['content'] | tojson }}{{ flavour }}")
    tpl = ChatTemplate(src, bos_token="<s>")
    assert tpl.render([{"role": "user", "content": "é\"x"}], flavour="!") == '<s>"é\\"x"!'
    with pytest.raises(ChatTemplateError, match="must be the user"):
        tpl.render(MSGS)


def test_sandbox_blocks_attribute_escapes():
    tpl = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ChatTemplateError):
        tpl.render(MSGS)


def test_matches_transformers_rendering_of_smollm_template():
    from jinja2 import Environment

    src = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
           "{{ '<|im_start|>system\nYou are helpful<|im_end|>\n' }}{% endif %}"
           "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
           "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
    msgs = [{"role": "user", "content": "Hi"}]
    plain = Environment(trim_blocks=True, lstrip_blocks=True).from_string(src)
    assert ChatTemplate(src).render(msgs) == plain.render(messages=msgs, add_generation_prompt=True)


def test_bad_template_and_bad_messages():
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{% for %}")
    with pytest.raises(ChatTemplateError, match="role"):
        ChatTemplate(CHATML).render([{"content": "x"}])
