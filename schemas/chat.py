"""The chat task: which language a short chat message is in, and what it talks about.

Data: chatterbot-corpus conversations in 24 languages (`jev data fetch && jev data prepare`; see
docs/data.md). The value lists keep the data set's spelling and order, since the layout hash of a
trained model depends on both. A few messages (pasted code, long jokes) run past the model's input
limit; the task declares truncation, since their start and end still tell the language and topic.
"""

from typing import Literal

from pydantic import BaseModel, Field

from jev.schema import FieldPolicy, Task

Language = Literal[
    "bengali",
    "chinese",
    "dutch",
    "english",
    "french",
    "german",
    "hebrew",
    "hindi",
    "indonesian",
    "italian",
    "japanese",
    "korean",
    "marathi",
    "oriya",
    "persian",
    "portuguese",
    "russian",
    "spanish",
    "swedish",
    "tamil",
    "traditionalchinese",
    "turkish",
    "ukrainian",
    "yoruba",
]

Topic = Literal[
    "ai",
    "botprofile",
    "coding",
    "compliment",
    "computers",
    "conversations",
    "emotion",
    "food",
    "gossip",
    "greetings",
    "health",
    "history",
    "humor",
    "literature",
    "money",
    "movies",
    "politics",
    "proverbs",
    "psychology",
    "science",
    "sports",
    "trivia",
]


class ChatInput(BaseModel):
    message: str = Field(min_length=1, description="One chat utterance, as typed.")


class ChatDecision(BaseModel):
    language: Language = Field(description="The language the message is written in.")
    topic: Topic = Field(description="The conversation topic the message belongs to.")


TASK = Task(
    name="chat",
    input_model=ChatInput,
    decision_model=ChatDecision,
    description="Tell the language and the topic of a short chat message.",
    truncate=True,
    policies={
        "language": FieldPolicy(abstain_below=0.5, conformal_coverage=0.9),
        "topic": FieldPolicy(abstain_below=0.5, conformal_coverage=0.9),
    },
)
