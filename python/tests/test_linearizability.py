"""The history checker the cluster's tests rely on, tried on histories whose answer is known:
it must refuse every undone write a cluster could show, and accept what a cache may do."""
from linearizability import NEVER, Op, check, check_key


def test_sequential_reads_of_the_last_write_or_misses_pass():
    ops = [Op("put", 1, 0, 1), Op("get", 1, 2, 3), Op("put", 2, 4, 5), Op("get", None, 6, 7),
           Op("get", 2, 8, 9), Op("erase", None, 10, 11), Op("get", None, 12, 13)]
    assert check_key(ops) is None


def test_a_read_older_than_an_acknowledged_put_fails():
    ops = [Op("put", 1, 0, 1), Op("put", 2, 2, 3), Op("get", 1, 4, 5)]
    assert "no order" in check_key(ops)


def test_a_read_of_an_erased_value_fails():
    ops = [Op("put", 1, 0, 1), Op("erase", None, 2, 3), Op("get", 1, 4, 5)]
    assert check_key(ops) is not None


def test_a_value_nobody_wrote_fails():
    assert "no put wrote" in check_key([Op("get", 7, 0, 1)])


def test_a_read_concurrent_with_a_put_may_see_either_value():
    for seen in (1, 2):
        ops = [Op("put", 1, 0, 1), Op("put", 2, 2, 6), Op("get", seen, 3, 4)]
        assert check_key(ops) is None
    # ...but once it saw the new one, a later read may not go back.
    ops = [Op("put", 1, 0, 1), Op("put", 2, 2, 6), Op("get", 2, 3, 4), Op("get", 1, 4.5, 5)]
    assert check_key(ops) is not None


def test_an_unacknowledged_put_may_land_late_but_only_once():
    # Put 1 failed (it may have landed anywhere later), put 2 was acknowledged: a read of 1
    # after 2 is the late landing -- and a read of 2 after that would need 2 written again.
    late = [Op("put", 1, 0, NEVER), Op("put", 2, 2, 3), Op("get", 1, 4, 5)]
    assert check_key(late) is None
    back = late + [Op("get", 2, 6, 7)]
    assert check_key(back) is not None


def test_an_unacknowledged_erase_explains_misses_and_nothing_else():
    ops = [Op("put", 1, 0, 1), Op("erase", None, 2, NEVER), Op("get", None, 3, 4),
           Op("get", 1, 5, 6)]
    assert check_key(ops) is None
    ops = [Op("put", 1, 0, 1), Op("erase", None, 2, 3), Op("put", 2, 4, NEVER),
           Op("get", 1, 5, 6)]
    assert check_key(ops) is not None


def test_check_names_the_key_that_fails():
    good = [Op("put", 1, 0, 1), Op("get", 1, 2, 3)]
    bad = [Op("put", 1, 0, 1), Op("put", 2, 2, 3), Op("get", 1, 4, 5)]
    assert check({"a": good, "b": bad}).startswith("b: ")
    assert check({"a": good}) is None


def test_a_long_history_with_many_failed_puts_is_decided():
    ops, t = [], 0.0
    for i in range(400):
        ret = NEVER if i % 3 == 0 else t + 0.5
        ops.append(Op("put", i, t, ret))
        ops.append(Op("get", i if ret != NEVER else None, t + 0.6, t + 0.7))
        t += 1
    assert check_key(ops) is None
    ops.append(Op("get", 1, t + 1, t + 2))  # an acknowledged put long since replaced
    assert check_key(ops) is not None
