#!/usr/bin/python3
"""Writes the chatbot sample's data: request/reply pairs of a small assistant.

Domain: timers, alarms, lights, weather, unit conversions, small talk, help.
Each intent has paraphrase templates built from parts (an opener, a core
phrase, a closer); the reply is a fixed sentence per intent that repeats the
request's slot values, which the model must copy through its attention.

Held out: the test split uses (opener, core, closer) combinations and slot
values never seen in training: other numbers, times, city and room names.
Slot values are spelled as characters (tokenize() below), so an unseen city
is made of seen characters and can be copied.

Output (DIR, default samples/chatbot/train/data): train.tsv, test.tsv
(request <TAB> reply, one per line, plain text). Seeded: same files every run.
  /usr/bin/python3 make_data.py [--out DIR] [--train N] [--test N] [--seed S]
"""
import argparse
import os
import random

OPENERS = ["", "please", "hey", "could you", "can you", "i want you to", "would you", "assistant ,"]
CLOSERS = ["", "please", "thanks", "now", "for me", "thank you"]

# intent: (core phrases, reply). {n} number, {t} time, {city}, {room}, {a} {b} units.
INTENTS = {
    "timer": (["set a timer for {n} minutes", "start a {n} minute timer", "timer for {n} minutes",
               "count down {n} minutes", "remind me in {n} minutes", "start a timer of {n} minutes"],
              "ok , timer set for {n} minutes ."),
    "alarm": (["set an alarm for {t}", "wake me up at {t}", "alarm at {t}", "set my alarm to {t}",
               "i need an alarm at {t}", "get me up at {t}"],
              "alarm set for {t} ."),
    "lights_on": (["turn on the lights in the {room}", "switch on the {room} lights", "lights on in the {room}",
                   "turn the {room} lights on", "light up the {room}", "make the {room} bright"],
                  "turning on the lights in the {room} ."),
    "lights_off": (["turn off the lights in the {room}", "switch off the {room} lights", "lights off in the {room}",
                    "turn the {room} lights off", "kill the lights in the {room}", "make the {room} dark"],
                   "turning off the lights in the {room} ."),
    "weather": (["what is the weather in {city}", "how is the weather in {city}", "weather for {city}",
                 "is it raining in {city}", "will it be sunny in {city}", "forecast for {city}"],
                "here is the forecast for {city} ."),
    "convert": (["convert {n} {a} to {b}", "how many {b} is {n} {a}", "what is {n} {a} in {b}",
                 "{n} {a} to {b}", "change {n} {a} into {b}", "express {n} {a} in {b}"],
                "converting {n} {a} to {b} ."),
    "greet": (["hello", "hi there", "good morning", "hi", "good evening", "hello assistant"],
              "hello ! how can i help ?"),
    "howareyou": (["how are you", "how are you doing", "how is it going", "are you ok",
                   "how do you feel", "what is up"],
                  "i am fine , thank you ."),
    "thanks": (["thank you so much", "thanks a lot", "much appreciated", "that was helpful",
                "great job", "cheers"],
               "you are welcome !"),
    "help": (["help", "what can you do", "what are your skills", "how do i use you",
              "i need help", "show me what you can do"],
             "i can set timers and alarms , switch lights , tell the weather and convert units ."),
}
UNITS = [("miles", "kilometers"), ("kilometers", "miles"), ("pounds", "kilograms"), ("kilograms", "pounds"),
         ("feet", "meters"), ("meters", "feet"), ("celsius", "fahrenheit"), ("fahrenheit", "celsius"),
         ("inches", "centimeters"), ("liters", "gallons")]
TEST_CITIES = ["paris", "tokyo", "lima", "oslo", "cairo", "denver", "madrid", "nairobi", "quito", "hanoi",
               "boston", "dublin", "vienna", "seoul", "perth", "havana", "zurich", "austin", "kyoto", "riga"]
TEST_ROOMS = ["garage", "attic", "pantry", "hallway", "nursery", "studio", "cellar", "porch"]
LETTERS = "abcdefghijklmnopqrstuvwxyz"
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "~"]  # "~" ends a spelled word


def vocabulary():
    """Specials, one "~c" token per character a slot value may hold, then every template word."""
    words = set(w for op in OPENERS + CLOSERS for w in op.split())
    for cores, reply in INTENTS.values():
        for text in cores + [reply]:
            words.update(w for w in text.split() if not w.startswith("{"))
    words.update(w for pair in UNITS for w in pair)
    return SPECIALS + ["~" + c for c in LETTERS + "0123456789:"] + sorted(words)


def tokenize(text, vocab):
    """Words of the vocabulary stay words; any other word is spelled: ~c ... ~ (deeprnn-chat does the same)."""
    out = []
    for w in text.split():
        if w in vocab:
            out.append(w)
        else:
            out += [("~" + c) if ("~" + c) in vocab else "<unk>" for c in w] + ["~"]
    return out


def detokenize(tokens):
    words, spell = [], ""
    for t in tokens:
        if t == "~":
            words.append(spell)
            spell = ""
        elif t.startswith("~"):
            spell += t[1:]
        elif t not in SPECIALS:
            words.append(t)
    return " ".join(words + ([spell] if spell else []))


def fake_word(rng, lo=3, hi=9):
    """A random word, pronounceable or not: training's city and room names."""
    vowels, cons = "aeiou", "bcdfghjklmnprstvwyz"
    n = rng.randint(lo, hi)
    if rng.random() < 0.5:  # any letters: repeated letters teach the copy to keep its place
        return "".join(rng.choice(LETTERS) for _ in range(n))
    return "".join(rng.choice(cons if i % 2 == 0 else vowels) if rng.random() < 0.85 else rng.choice(LETTERS)
                   for i in range(n))


def slots(rng, test):
    """Slot values; numbers and times split by parity so test values are unseen."""
    n = rng.randrange(1, 200)
    while (n % 7 == 3) != test:
        n = rng.randrange(1, 200)
    h, m = rng.randrange(0, 24), rng.randrange(0, 60)
    while (m % 7 == 3) != test:
        m = rng.randrange(0, 60)
    a, b = rng.choice(UNITS)
    held = set(TEST_CITIES) | set(TEST_ROOMS)
    city = rng.choice(TEST_CITIES) if test else fake_word(rng)
    room = rng.choice(TEST_ROOMS) if test else fake_word(rng, 4, 8)
    while not test and (city in held or room in held):
        city, room = fake_word(rng), fake_word(rng, 4, 8)
    return {"n": str(n), "t": f"{h}:{m:02d}", "city": city, "room": room, "a": a, "b": b}


def combos():
    """Every (intent, opener, core, closer); one in five is held out for test."""
    out = {False: [], True: []}
    for intent, (cores, _) in sorted(INTENTS.items()):
        for ci, core in enumerate(cores):
            for oi, op in enumerate(OPENERS):
                for si, cl in enumerate(CLOSERS):
                    held = (ci * 7 + oi * 3 + si) % 5 == 0
                    out[held].append((intent, op, core, cl))
    return out


def make(rng, pool, count, test):
    rows = []
    for _ in range(count):
        intent, op, core, cl = rng.choice(pool)
        s = slots(rng, test)
        req = " ".join(p for p in (op, core.format(**s), cl) if p)
        rows.append((req, INTENTS[intent][1].format(**s)))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    ap.add_argument("--train", type=int, default=20000)
    ap.add_argument("--test", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=9)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    pools = combos()
    os.makedirs(a.out, exist_ok=True)
    for name, test, n in (("train", False, a.train), ("test", True, a.test)):
        with open(os.path.join(a.out, name + ".tsv"), "w") as f:
            for req, rep in make(rng, pools[test], n, test):
                f.write(f"{req}\t{rep}\n")
    with open(os.path.join(a.out, "vocab.txt"), "w") as f:
        f.write("\n".join(vocabulary()) + "\n")
    print(f"make_data: {a.train} train, {a.test} test pairs in {a.out}")


if __name__ == "__main__":
    main()
