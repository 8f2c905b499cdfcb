"""The speech sample's vocabulary (10 digits, 10 commands) and word scoring. The model's
labels.txt is "<blank>" followed by these, in this order."""
VOCAB = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
         "yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go"]
BLANK = "<blank>"
LABELS = [BLANK] + VOCAB
# train.py --filler-label: one more CTC label, after the words, that every out-of-vocabulary filler word is
# trained to emit; decoders drop it (the C++ program drops every label in angle brackets after the blank).
FILLER = "<filler>"


def edit_distance(a, b):
    """Word-level Levenshtein distance: substitutions + deletions + insertions."""
    d = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(b) + 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] != b[j - 1]))
    return d[len(b)]
