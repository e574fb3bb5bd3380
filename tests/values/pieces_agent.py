"""An agent whose episode comes in two pieces (imported by path in the agent process): its second
request does not extend the first's history, so the gateway records two token-exact trajectories
of one episode (rollout.episode_parts); it returns the second answer."""

from __future__ import annotations


def prompt_text(task) -> str:
    prompt = task.prompt if hasattr(task, "prompt") else task["prompt"]
    return prompt if isinstance(prompt, str) else str(prompt[-1]["content"])


async def two_histories(task, client):
    model = (await client.models.list()).data[0].id
    prompt = prompt_text(task)
    await client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}])
    again = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": f"Once more. {prompt}"}])
    return again.choices[0].message.content or ""
