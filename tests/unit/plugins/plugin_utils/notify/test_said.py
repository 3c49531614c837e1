"""What is said once is said once across the memory (notify/said.py): whichever controller, execution node or fork
gets there first, on SQLite and on PostgreSQL."""

from __future__ import annotations

import os

from memory_places import MemoryPlace

from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.said import SaidOnce


def test_what_one_node_said_first_another_node_does_not_say_again(memory_place: MemoryPlace) -> None:
    node_a, node_b = memory_place.node("exec-a").open(), memory_place.node("exec-b").open()
    assert SaidOnce(node_a.database).first_to_say("fleet-9-opened", at=1.0)
    assert not SaidOnce(node_b.database).first_to_say("fleet-9-opened", at=2.0)
    assert not SaidOnce(node_a.database).first_to_say("fleet-9-opened", at=3.0)
    # another thing to say is another row
    assert SaidOnce(node_b.database).first_to_say("fleet-9-closed", at=4.0)
    assert memory_place.sql("SELECT what, said_at FROM notices_said ORDER BY what") == [("fleet-9-closed", 4.0), ("fleet-9-opened", 1.0)]


def test_of_many_workers_racing_to_say_it_exactly_one_does(memory_place: MemoryPlace) -> None:
    """Twelve forked processes, each with its own connection, released together (as the forks of a storm's job)."""
    go_read, go_write = os.pipe()
    workers = []
    for number in range(12):
        answer_read, answer_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            said = False
            try:
                memory = memory_place.node(f"node{number % 2}").open()
                os.read(go_read, 1)
                said = SaidOnce(memory.database).first_to_say("fleet-3-opened", at=float(number))
                memory.close()
            finally:  # a worker never returns into the test session
                os.write(answer_write, b"1" if said else b"0")
                os._exit(0)
        os.close(answer_write)
        workers.append((pid, answer_read))
    os.write(go_write, b"." * len(workers))
    answers = []
    for pid, answer_read in workers:
        answers.append(os.read(answer_read, 1))
        os.close(answer_read)
        os.waitpid(pid, 0)
    os.close(go_read)
    os.close(go_write)
    assert sorted(answers) == [b"0"] * 11 + [b"1"]
