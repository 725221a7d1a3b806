"""How a problem becomes prompt token ids (datasets are read by ``rewards.problems``)."""

from __future__ import annotations

from rewards.problems import Problem

# Skywork-OR1's instruction after the problem (it asks for the answer in \boxed{}).
BOXED_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


class PromptRenderer:
    """Problem -> token ids.

    A flat problem (text): the tokenizer's chat template when it has one (and it is wanted), the
    text as the user message followed by BOXED_INSTRUCTION; otherwise ``template`` (the tiny world's
    "Q: {problem}\\nA: "). A verl-layout problem (chat messages, ``Problem.messages``): its messages as
    they are, system message included, through the chat template (the dataset wrote the instruction);
    without a chat template, their contents joined by blank lines in ``template``.
    """

    def __init__(self, tokenizer, chat_template: bool = True, template: str = "{problem}\n"):
        self.tok = tokenizer
        self.use_chat = chat_template and getattr(tokenizer, "chat_template", None) is not None
        self.template = template

    def text(self, problem: str | Problem) -> str:
        if isinstance(problem, Problem) and problem.messages is not None:
            if self.use_chat:
                return self.tok.apply_chat_template([{"role": r, "content": c} for r, c in problem.messages],
                                                    tokenize=False, add_generation_prompt=True)
            return self.template.format(problem="\n\n".join(c for _, c in problem.messages))
        text = problem.problem if isinstance(problem, Problem) else problem
        if self.use_chat:
            return self.tok.apply_chat_template(
                [{"role": "user", "content": f"{text} {BOXED_INSTRUCTION}"}],
                tokenize=False, add_generation_prompt=True)
        return self.template.format(problem=text)

    def ids(self, problem: str | Problem) -> list[int]:
        return self.tok(self.text(problem), add_special_tokens=not self.use_chat)["input_ids"]
