"""A deterministic Nexmark event generator: persons, auctions and bids as JSON.

Follows the Nexmark benchmark's generator (Tucker et al.; the Apache Beam / Flink `nexmark`
implementations) in its shape, not byte for byte:

- events come in epochs of 50: 1 person, 3 auctions, 46 bids (PERSON_PROPORTION,
  AUCTION_PROPORTION, BID_PROPORTION); event `n` is a person, an auction or a bid by its place
  in the epoch;
- ids: persons from FIRST_PERSON_ID (1000), auctions from FIRST_AUCTION_ID (1000), each counting
  up as its kind appears; auctions are sold by recent persons, bids go to recent auctions
  ("hot" auctions and bidders with probability HOT_RATIO), as in the reference generator;
- event time (`date_time`, epoch ms) is `base_time_ms + n * 1000 / rate`: the stream's own clock
  at `rate` events/s, independent of the wall clock, so a preload is reproducible;
- every value is a pure function of (seed, n) through a splitmix64 hash: event `n` is the same
  whatever was generated before it, in whichever process.

    from dsflow.datagen import nexmark
    kind, key, record = nexmark.event(7, seed=0)         # ("bid", "1000", {...})
    nexmark.bids(0, 1000)                                  # the bids among events 0..999

Columns (snake case, so SQL needs no quoting):

    person:  id, name, email_address, credit_card, city, state, date_time, extra
    auction: id, item_name, description, initial_bid, reserve, date_time, expires, seller,
             category, extra
    bid:     auction, bidder, price, channel, url, date_time, extra

Also a dsflow datagen source: `dsflow.datagen` registers `nexmark_bids`, `nexmark_auctions` and
`nexmark_persons` on top of this module (there `date_time` is the wall clock, like the other
generators). Lives in the package so installed dsflow can use it; `bench/nexmark.py` re-exports it.
"""

from __future__ import annotations

from collections.abc import Iterator

PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
PROPORTION_DENOMINATOR = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION  # 50

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
HOT_RATIO = 2  # 1 in HOT_RATIO bids goes to a hot auction / comes from a hot bidder
HOT_AUCTIONS = 100  # hot auctions are multiples of this many ids
HOT_BIDDERS = 100
NUM_IN_FLIGHT_AUCTIONS = 100
ACTIVE_PEOPLE = 1000
AUCTION_LENGTH_MS = 10_000

BASE_TIME_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
DEFAULT_RATE = 10_000  # events/s of event time, Nexmark's default first-event rate

US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond",
             "Seattle", "Kent", "Cheyenne")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")
CHANNELS = ("Google", "Facebook", "Baidu", "Apple")

_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finalizer: a well-spread 64-bit hash of x."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


class _Draws:
    """Independent pseudo-random draws for one event: draw i is a pure function of (seed, n, i)."""

    __slots__ = ("state",)

    def __init__(self, seed: int, n: int) -> None:
        self.state = _mix((seed * 0x100000001B3) ^ n)

    def below(self, bound: int) -> int:
        self.state = _mix(self.state)
        return self.state % bound

    def pick(self, items: tuple) -> object:
        return items[self.below(len(items))]

    def text(self, length: int) -> str:
        self.state = _mix(self.state)
        word, x = [], self.state
        for _ in range(length):
            word.append(chr(97 + x % 26))
            x //= 26
            if x == 0:
                self.state = _mix(self.state)
                x = self.state
        return "".join(word)


def kind_of(n: int) -> str:
    """'person', 'auction' or 'bid': event n's kind, by its place in its epoch of 50."""
    offset = n % PROPORTION_DENOMINATOR
    if offset < PERSON_PROPORTION:
        return "person"
    if offset < PERSON_PROPORTION + AUCTION_PROPORTION:
        return "auction"
    return "bid"


def last_person_id(n: int) -> int:
    """The id of the newest person at or before event n."""
    epoch, offset = divmod(n, PROPORTION_DENOMINATOR)
    return FIRST_PERSON_ID + epoch * PERSON_PROPORTION + min(offset, PERSON_PROPORTION - 1)


def last_auction_id(n: int) -> int:
    """The id of the newest auction at or before event n (FIRST_AUCTION_ID before the first one)."""
    epoch, offset = divmod(n, PROPORTION_DENOMINATOR)
    within = min(max(offset - PERSON_PROPORTION, -1), AUCTION_PROPORTION - 1)
    return max(FIRST_AUCTION_ID, FIRST_AUCTION_ID + epoch * AUCTION_PROPORTION + within)


def event_time(n: int, rate: float = DEFAULT_RATE, base_time_ms: int = BASE_TIME_MS) -> int:
    """Event n's time in epoch ms at `rate` events/s."""
    return base_time_ms + int(n * 1000 / rate)


def person(n: int, seed: int = 0, time_ms: int | None = None) -> dict:
    d = _Draws(seed, n)
    pid = last_person_id(n)
    name = f"{d.pick(FIRST_NAMES)} {d.pick(LAST_NAMES)}"
    return {
        "id": pid, "name": name, "email_address": f"{d.text(7)}@{d.text(5)}.com",
        "credit_card": " ".join(f"{d.below(10_000):04d}" for _ in range(4)),
        "city": d.pick(US_CITIES), "state": d.pick(US_STATES),
        "date_time": event_time(n) if time_ms is None else time_ms, "extra": d.text(10),
    }


def auction(n: int, seed: int = 0, time_ms: int | None = None) -> dict:
    d = _Draws(seed, n)
    newest = last_person_id(n)
    if d.below(HOT_RATIO) > 0:  # a hot seller: a recent multiple of HOT_BIDDERS
        seller = max(FIRST_PERSON_ID, (newest // HOT_BIDDERS) * HOT_BIDDERS)
    else:
        seller = max(FIRST_PERSON_ID, newest - d.below(ACTIVE_PEOPLE))
    initial = d.below(1_000) + 1
    at = event_time(n) if time_ms is None else time_ms
    return {
        "id": last_auction_id(n), "item_name": d.text(12), "description": d.text(20),
        "initial_bid": initial, "reserve": initial + d.below(1_000) + 1, "date_time": at,
        "expires": at + AUCTION_LENGTH_MS + d.below(AUCTION_LENGTH_MS), "seller": seller,
        "category": FIRST_CATEGORY_ID + d.below(NUM_CATEGORIES), "extra": d.text(10),
    }


def bid(n: int, seed: int = 0, time_ms: int | None = None) -> dict:
    d = _Draws(seed, n)
    newest_auction, newest_person = last_auction_id(n), last_person_id(n)
    if d.below(HOT_RATIO) > 0:
        auction_id = max(FIRST_AUCTION_ID, (newest_auction // HOT_AUCTIONS) * HOT_AUCTIONS)
    else:
        auction_id = max(FIRST_AUCTION_ID, newest_auction - d.below(NUM_IN_FLIGHT_AUCTIONS))
    if d.below(HOT_RATIO) > 0:
        bidder = max(FIRST_PERSON_ID, (newest_person // HOT_BIDDERS) * HOT_BIDDERS + 1)
    else:
        bidder = max(FIRST_PERSON_ID, newest_person - d.below(ACTIVE_PEOPLE))
    channel = d.pick(CHANNELS)
    return {
        "auction": auction_id, "bidder": bidder, "price": 100 + d.below(100_000), "channel": channel,
        "url": f"https://www.nexmark.com/{d.text(5)}/item.htm?query=1&channel_id={d.below(1_000)}",
        "date_time": event_time(n) if time_ms is None else time_ms, "extra": d.text(8),
    }


_MAKERS = {"person": person, "auction": auction, "bid": bid}
_KEY_FIELD = {"person": "id", "auction": "id", "bid": "auction"}


def event(n: int, seed: int = 0, time_ms: int | None = None) -> tuple[str, str, dict]:
    """(kind, key, record) of event n; the key is the person id, auction id, or a bid's auction."""
    kind = kind_of(n)
    record = _MAKERS[kind](n, seed, time_ms)
    return kind, str(record[_KEY_FIELD[kind]]), record


def events(start: int, stop: int, seed: int = 0) -> Iterator[tuple[str, str, dict]]:
    """Events start <= n < stop."""
    for n in range(start, stop):
        yield event(n, seed)


def bids(start: int, stop: int, seed: int = 0) -> Iterator[tuple[int, dict]]:
    """(n, bid) for the bids among events start <= n < stop."""
    for n in range(start, stop):
        if kind_of(n) == "bid":
            yield n, bid(n, seed)


def nth_of_kind(kind: str, i: int) -> int:
    """The event number of the i-th (0-based) event of `kind`."""
    epoch, within = divmod(i, {"person": PERSON_PROPORTION, "auction": AUCTION_PROPORTION, "bid": BID_PROPORTION}[kind])
    first = {"person": 0, "auction": PERSON_PROPORTION, "bid": PERSON_PROPORTION + AUCTION_PROPORTION}[kind]
    return epoch * PROPORTION_DENOMINATOR + first + within
