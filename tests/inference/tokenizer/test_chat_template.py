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


# llama.cpp's copies of families' own templates (models/templates, in the peer's tree), each
# with a marker only that family's prompt has.
FAMILIES = {
    "meta-llama-Llama-3.1-8B-Instruct": "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "Qwen-Qwen2.5-7B-Instruct": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "Qwen-Qwen3-0.6B": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "microsoft-Phi-3.5-mini-instruct": "<|user|>\nHi<|end|>\n<|assistant|>\n",
    "google-gemma-2-2b-it": "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "mistralai-Mistral-Nemo-Instruct-2407": "[INST]Hi[/INST]",
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_families_templates_render_as_transformers_does(family):
    from transformers.utils.chat_template_utils import render_jinja_template

    from tests.oracles import llama_cpp

    path = llama_cpp.tree() / "models" / "templates" / f"{family}.jinja"
    if not path.is_file():
        pytest.skip(f"{path} is absent (run shared/peers/llama-server.sh)")
    source = path.read_text(encoding="utf-8")
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Hi"}]
    ours = ChatTemplate(source, bos_token="<s>", eos_token="</s>").render(msgs)
    theirs = render_jinja_template([msgs], chat_template=source, add_generation_prompt=True,
                                   bos_token="<s>", eos_token="</s>")[0][0]
    assert ours == theirs and FAMILIES[family] in ours


def test_template_override_file_replaces_the_models(tmp_path):
    from inference.loaders import WeightError, load_model
    from tests.inference.loaders.gguf_writer import write_tiny_gguf
    from tests.inference.model.tiny_llama import make_hf_llama

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, make_hf_llama("tied_mha"))
    own = load_model(path, use_cache=False).chat_template
    assert own is not None and own.render(MSGS[1:]).startswith("<|im_start|>user")
    override = tmp_path / "plain.jinja"
    override.write_text("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n"
                        "{% endfor %}{{ bos_token }}")
    loaded = load_model(path, use_cache=False, chat_template=override)
    assert loaded.chat_template is not None
    assert loaded.chat_template.render(MSGS) == "[system] Be brief.\n[user] Hi\n<|im_start|>"
    for bad in (tmp_path / "missing.jinja", tmp_path / "empty.jinja"):
        if bad.name == "empty.jinja":
            bad.write_text("  \n")
        with pytest.raises(WeightError, match=bad.name):
            load_model(path, use_cache=False, chat_template=bad)
