use super::*;

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn slots_entry(start: i64, end: i64, host: &str, port: i64, id: &str) -> Value {
    Value::Array(vec![
        Value::Int(start),
        Value::Int(end),
        Value::Array(vec![
            bulk(host),
            Value::Int(port),
            bulk(id),
            Value::Array(vec![]),
        ]),
        Value::Array(vec![bulk(host), Value::Int(port + 3), bulk("replica")]),
    ])
}

fn addr(port: u16) -> NodeAddr {
    NodeAddr {
        host: "127.0.0.1".into(),
        port,
    }
}

/// Three primaries on 7001..7003 splitting the slots as `redis-cli --cluster create` does.
fn three_way_map() -> Value {
    Value::Array(vec![
        slots_entry(0, 5460, "127.0.0.1", 7001, "a"),
        slots_entry(5461, 10922, "127.0.0.1", 7002, "b"),
        slots_entry(10923, 16383, "127.0.0.1", 7003, "c"),
    ])
}

fn myself(id: &str, flags: &str, epoch: u64, slots: &str) -> String {
    format!(
        "zz 127.0.0.1:1@2 master - 0 0 9 connected 0-1\n\
         {id} 127.0.0.1:7001@7101 {flags} - 0 0 {epoch} connected {slots}\n"
    )
}

fn settled() -> Topology {
    let map = parse_slot_map(&three_way_map()).unwrap();
    let reports = [
        (7001, "a", 1, "0-5460"),
        (7002, "b", 2, "5461-10922"),
        (7003, "c", 3, "10923-16383"),
    ]
    .into_iter()
    .map(|(port, id, epoch, slots)| {
        (
            addr(port),
            parse_self_report(&myself(id, "myself,master", epoch, slots)).unwrap(),
        )
    })
    .collect();
    Topology::new(map, reports).unwrap()
}

fn with_report(topology: &Topology, port: u16, report: SelfReport) -> Topology {
    let mut changed = topology.clone();
    changed.primaries.get_mut(&addr(port)).unwrap().1 = report;
    changed
}

#[test]
fn the_slot_map_gives_each_primary_its_merged_ranges() {
    let reply = Value::Array(vec![
        slots_entry(0, 99, "127.0.0.1", 7001, "a"),
        slots_entry(200, 16383, "127.0.0.1", 7002, "b"),
        slots_entry(100, 199, "127.0.0.1", 7001, "a"),
    ]);
    let map = parse_slot_map(&reply).unwrap();
    assert_eq!(map[&addr(7001)].ranges, vec![(0, 199)]);
    assert_eq!(map[&addr(7002)].ranges, vec![(200, 16383)]);
    assert_eq!(map.len(), 2, "replicas are not primaries: {map:?}");
}

#[test]
fn a_primary_without_a_usable_endpoint_is_not_understood() {
    for host in ["", "?"] {
        let reply = Value::Array(vec![slots_entry(0, 16383, host, 7001, "a")]);
        let error = parse_slot_map(&reply).unwrap_err();
        assert!(error.contains("cluster-announce"), "{error}");
    }
}

#[test]
fn a_node_reports_its_role_epoch_slots_and_open_migrations() {
    let report = parse_self_report(&myself(
        "a",
        "myself,master",
        7,
        "0-99 101 100 [102->-b] [103-<-c]",
    ))
    .unwrap();
    assert_eq!(
        report,
        SelfReport {
            id: "a".into(),
            primary: true,
            config_epoch: 7,
            ranges: vec![(0, 101)],
            open: vec!["[102->-b]".into(), "[103-<-c]".into()],
        }
    );
    let replica = parse_self_report(&myself("a", "myself,slave", 7, "")).unwrap();
    assert!(!replica.primary);
    assert!(parse_self_report("a 127.0.0.1:1@2 master - 0 0 1 connected 0-1\n").is_err());
}

#[test]
fn a_whole_cluster_of_agreeing_primaries_is_settled_and_equal_to_itself() {
    let topology = settled();
    assert_eq!(topology.unsettled(), None);
    assert_eq!(topology.change_since(&settled()), None);
    assert_eq!(
        topology.primaries().map(|a| a.port).collect::<Vec<_>>(),
        [7001, 7002, 7003]
    );
}

#[test]
fn a_migration_a_demoted_primary_a_disagreement_or_a_hole_is_unsettled() {
    let base = settled();
    let migrating = with_report(
        &base,
        7001,
        parse_self_report(&myself("a", "myself,master", 1, "0-5460 [17->-b]")).unwrap(),
    );
    assert!(migrating.unsettled().unwrap().contains("migration"));
    let demoted = with_report(
        &base,
        7001,
        parse_self_report(&myself("a", "myself,slave", 1, "")).unwrap(),
    );
    assert!(demoted.unsettled().unwrap().contains("no longer a primary"));
    let replaced = with_report(
        &base,
        7001,
        parse_self_report(&myself("x", "myself,master", 4, "0-5460")).unwrap(),
    );
    assert!(replaced.unsettled().unwrap().contains("slot map names a"));
    let disagreeing = with_report(
        &base,
        7001,
        parse_self_report(&myself("a", "myself,master", 1, "0-5459")).unwrap(),
    );
    assert!(
        disagreeing
            .unsettled()
            .unwrap()
            .contains("serves slots 0-5459")
    );

    let holed = Value::Array(vec![
        slots_entry(0, 5460, "127.0.0.1", 7001, "a"),
        slots_entry(10923, 16383, "127.0.0.1", 7003, "c"),
    ]);
    let reports = [(7001, "a", "0-5460"), (7003, "c", "10923-16383")]
        .into_iter()
        .map(|(port, id, slots)| {
            (
                addr(port),
                parse_self_report(&myself(id, "myself,master", 1, slots)).unwrap(),
            )
        })
        .collect();
    let holed = Topology::new(parse_slot_map(&holed).unwrap(), reports).unwrap();
    assert!(holed.unsettled().unwrap().contains("slot 5461"));
}

#[test]
fn a_failover_or_a_finished_slot_move_between_the_two_reads_is_a_change() {
    let before = settled();
    // A failover and back: same node, same slots, a higher config epoch.
    let failed_back = with_report(
        &before,
        7002,
        parse_self_report(&myself("b", "myself,master", 8, "5461-10922")).unwrap(),
    );
    assert!(
        failed_back
            .change_since(&before)
            .unwrap()
            .contains("config epoch of 127.0.0.1:7002 went from 2 to 8")
    );
    // The replica took over: another address serves the slots.
    let promoted_map = Value::Array(vec![
        slots_entry(0, 5460, "127.0.0.1", 7001, "a"),
        slots_entry(5461, 10922, "127.0.0.1", 7005, "e"),
        slots_entry(10923, 16383, "127.0.0.1", 7003, "c"),
    ]);
    let reports = [
        (7001, "a", 1, "0-5460"),
        (7005, "e", 9, "5461-10922"),
        (7003, "c", 3, "10923-16383"),
    ]
    .into_iter()
    .map(|(port, id, epoch, slots)| {
        (
            addr(port),
            parse_self_report(&myself(id, "myself,master", epoch, slots)).unwrap(),
        )
    })
    .collect();
    let promoted = Topology::new(parse_slot_map(&promoted_map).unwrap(), reports).unwrap();
    assert_eq!(promoted.unsettled(), None);
    assert!(
        promoted
            .change_since(&before)
            .unwrap()
            .contains("primaries went from")
    );
}
