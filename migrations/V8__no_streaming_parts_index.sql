-- V6's partial index of the parts still streaming goes: every part a streamed chunk
-- appended was written to it as well as to the table's primary key, and with many
-- sessions streaming at once each index keyed by session costs a page of its own per
-- session in every commit (see BENCHMARKS.md, group commit).
--
-- Nothing needs it. The parts still streaming are always the last parts of the
-- session's last item: a batch appends only to the message that ends the history,
-- and whatever comes after that message (a send, another item, the end of its turn)
-- seals it first. So the store finds them through the primary key: the last part of
-- the session's last item tells whether it is still streaming, and sealing reads the
-- item's parts from the last sealed one on. No row changes.

DROP INDEX item_parts_streaming;
