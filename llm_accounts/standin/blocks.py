"""Content blocks and their stream deltas, shared by the plain replies (``replies``) and the
server tools' blocks (``server_tools``).
"""

from dataclasses import dataclass

# Delta sizes in characters, cycled: irregular on purpose, like real streams, so a client's
# delta handling (and key scrubbing) is tested at awkward boundaries.
PIECE_SIZES = (5, 1, 9, 3, 12, 2, 7)


@dataclass
class Block:
    final: dict  # the block as in a non-streamed message's content
    start: dict  # the content_block of content_block_start
    deltas: list  # the deltas of content_block_delta, in order


def pieces(text, sizes=PIECE_SIZES):
    out, position, turn = [], 0, 0
    while position < len(text):
        size = sizes[turn % len(sizes)]
        out.append(text[position : position + size])
        position += size
        turn += 1
    return out
