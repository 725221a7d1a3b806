"""How a problem becomes prompt token ids (datasets are read by ``rewards.problems``)."""

from __future__ import annotations

# Skywork-OR1's instruction after the problem (it asks for the answer in \boxed{}).
BOXED_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


class PromptRenderer:
    """Problem text -> token ids: the tokenizer's chat template when it has one (and it is wanted),
    otherwise `template` (the tiny world's "Q: {problem}\\nA: ")."""

    def __init__(self, tokenizer, chat_template: bool = True, template: str = "{problem}\n"):
        self.tok = tokenizer
        self.use_chat = chat_template and getattr(tokenizer, "chat_template", None) is not None
        self.template = template

    def text(self, problem: str) -> str:
        if self.use_chat:
            return self.tok.apply_chat_template(
                [{"role": "user", "content": f"{problem} {BOXED_INSTRUCTION}"}],
                tokenize=False, add_generation_prompt=True)
        return self.template.format(problem=problem)

    def ids(self, problem: str) -> list[int]:
        return self.tok(self.text(problem), add_special_tokens=not self.use_chat)["input_ids"]
