"""`/v1/completions`: prompt text in, encoded as the raw prompt format is, no chat template; and
`reinforge serve` says so when a model trained on raw prompts is asked through the chat template."""

from __future__ import annotations


import httpx
import openai
import pytest

from reinforge.config import dump_config, load_config
from reinforge.engines.base import SamplingParams
from reinforge.envs.chat_format import ChatFormat
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.gateway import Gateway
from reinforge.run.serve_command import chat_format_warning
from reinforge.models.loading import save_model
from reinforge.tasks.task import Task
from gateway_fakes import ScriptedEngine
from serving import served


def test_a_text_prompt_is_sampled_as_the_raw_prompt_format_encodes_it(tokenizer, client_for) -> None:
    engine = ScriptedEngine(tokenizer, lambda call, row: "46", tokenizer.eos_token_id)
    with Gateway(engine, tokenizer, max_new_tokens=5) as gateway:
        client = client_for(gateway.base_url, gateway.api_key)
        reply = client.completions.create(model="policy", prompt="12+34=", temperature=0.5)
    ((prompts, params),) = engine.calls
    raw = SingleTurnEnv(tokenizer, "raw")  # what training on raw prompts sampled from
    assert prompts == [raw.prompt_ids(Task(id="t", prompt="12+34=", answer="46"))]
    assert prompts[0] != ChatFormat(tokenizer).prompt_ids([{"role": "user", "content": "12+34="}])  # no template
    assert params.stop_token_ids == raw.stop_token_ids and params.temperature == 0.5 and params.max_new_tokens == 5
    assert reply.object == "text_completion" and reply.model == "policy"
    (choice,) = reply.choices
    assert choice.text == "46" and choice.finish_reason == "stop" and choice.index == 0
    assert reply.usage.prompt_tokens == len(prompts[0]) and reply.usage.completion_tokens == len(tokenizer("46", add_special_tokens=False).input_ids) + 1


def test_several_prompts_token_ids_n_choices_stop_strings_and_logprobs(tokenizer, client_for) -> None:
    engine = ScriptedEngine(tokenizer, lambda call, row: "7+8=15", tokenizer.eos_token_id)
    ids = tokenizer("3+4=", add_special_tokens=False).input_ids
    with Gateway(engine, tokenizer, window_s=0.2) as gateway:
        client = client_for(gateway.base_url, gateway.api_key)
        reply = client.completions.create(model="policy", prompt=["1+1=", "2+2="], n=2, stop=["="], logprobs=0)
        by_ids = client.completions.create(model="policy", prompt=ids)
    sampled = [p for prompts, _ in engine.calls for p in prompts]
    assert tokenizer("1+1=").input_ids in sampled and tokenizer("2+2=").input_ids in sampled and ids in sampled
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    assert all(c.text == "7+8" and c.finish_reason == "stop" for c in reply.choices)  # cut before the stop string
    logprobs = reply.choices[0].logprobs
    assert "".join(logprobs.tokens).startswith("7+8") and len(logprobs.tokens) == len(logprobs.token_logprobs)
    assert logprobs.token_logprobs[0] == pytest.approx(-0.1) and logprobs.text_offset[0] == 0
    assert by_ids.choices[0].text == "7+8=15" and by_ids.choices[0].logprobs is None


@pytest.mark.parametrize("extra, param", [
    ({"echo": True}, "echo"), ({"logprobs": 2}, "logprobs"), ({"suffix": "x"}, "suffix"),
    ({"best_of": 3}, "best_of"), ({"stream": True}, "stream"), ({"prompt": [10 ** 9]}, "prompt"),
    ({"prompt": []}, "prompt"), ({"prompt": 5}, "prompt"),
])
def test_what_cannot_be_honoured_is_refused_naming_the_field(tokenizer, extra, param) -> None:
    engine = ScriptedEngine(tokenizer, lambda call, row: "1", tokenizer.eos_token_id)
    with Gateway(engine, tokenizer) as gateway:
        body = {"model": "policy", "prompt": "1+1=", **extra}
        reply = httpx.post(f"{gateway.base_url}/completions", json=body, timeout=20,
                           headers={"Authorization": f"Bearer {gateway.api_key}"})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == param, reply.text
    assert engine.calls == []


def test_unknown_model_and_missing_key_are_refused(tokenizer, client_for) -> None:
    engine = ScriptedEngine(tokenizer, lambda call, row: "1", tokenizer.eos_token_id)
    with Gateway(engine, tokenizer) as gateway:
        with pytest.raises(openai.NotFoundError, match="does not exist"):
            client_for(gateway.base_url, gateway.api_key).completions.create(model="other", prompt="1")
        with pytest.raises(openai.AuthenticationError):
            client_for(gateway.base_url, "wrong").completions.create(model="policy", prompt="1")
        session = gateway.open_session("s", sampling=SamplingParams())
        with pytest.raises(openai.NotFoundError):  # sessions record chat episodes only
            client_for(session.base_url, gateway.api_key).completions.create(model="policy", prompt="1")
    assert engine.calls == []


def write_run(run_dir, *overrides):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(dump_config(load_config("default", list(overrides))))


def test_the_warning_names_a_raw_trained_run_and_only_that(tokenizer, tmp_path) -> None:
    model_dir = tmp_path / "raw" / "final"
    model_dir.mkdir(parents=True)
    write_run(tmp_path / "raw", "rollout.prompt_format=raw")
    warning = chat_format_warning(str(model_dir), tokenizer)
    assert "trained on raw prompts (rollout.prompt_format=raw in" in warning and "/v1/completions" in warning
    chat_dir = tmp_path / "chat" / "final"
    chat_dir.mkdir(parents=True)
    write_run(tmp_path / "chat", "rollout.prompt_format=chat")
    assert chat_format_warning(str(chat_dir), tokenizer) is None
    write_run(tmp_path / "chat", "rollout.prompt_format=auto")  # auto + a tokenizer with a template: chat
    assert chat_format_warning(str(chat_dir), tokenizer) is None
    no_run = tmp_path / "loose"
    no_run.mkdir()
    assert chat_format_warning(str(no_run), tokenizer) is None  # nothing says how it was trained
    templateless = type("T", (), {"chat_template": None})()
    assert "no chat template" in chat_format_warning(str(no_run), templateless)


def test_reinforge_serve_warns_at_start_and_on_chat_responses(tokenizer, nano_model, tmp_path, client_for) -> None:
    write_run(tmp_path / "run", "rollout.prompt_format=raw")
    model_dir = save_model(nano_model, tokenizer, tmp_path / "run" / "final")
    with served(str(model_dir)) as server:
        gateway = server.gateway
        assert "WARNING: this model was trained on raw prompts" in server.out.getvalue()
        client = client_for(gateway.base_url, gateway.api_key)
        chat = client.chat.completions.with_raw_response.create(model="final", messages=[{"role": "user", "content": "1+2="}])
        assert "trained on raw prompts" in chat.headers["x-reinforge-warning"]
        assert "trained on raw prompts" in chat.parse().model_extra["warning"]
        text = client.completions.with_raw_response.create(model="final", prompt="1+2=")
        assert "x-reinforge-warning" not in text.headers and 1 <= text.parse().usage.completion_tokens <= 3
    assert not server.thread.is_alive()
