//! Tests that the schema the SQLite migrations store asks nothing of SQLite newer than
//! 3.37.2 (Ubuntu 22.04's; Debian 12's and Python 3.11's are 3.40), so that common
//! tools can read the database and delete its rows, and that V15, which took
//! `concat_ws`, `->` and `->>` out, gives exactly what they gave. It only reads
//! schemas built in memory.

use rusqlite::Connection;

use super::schema::{build_reference, embedded, latest_version};

/// Functions SQLite 3.37.2 does not have, with the version that brought each.
const NEWER_FUNCTIONS: &[(&str, &str)] = &[
    ("unixepoch", "3.38"),
    ("format", "3.38"),
    ("unhex", "3.41"),
    ("json_error_position", "3.42"),
    ("octet_length", "3.43"),
    ("timediff", "3.43"),
    ("concat", "3.44"),
    ("concat_ws", "3.44"),
    ("string_agg", "3.44"),
    ("json_pretty", "3.46"),
    ("if", "3.48"),
    ("unistr", "3.50"),
    ("unistr_quote", "3.50"),
    ("median", "3.51"),
    ("percentile", "3.51"),
    ("percentile_cont", "3.51"),
    ("percentile_disc", "3.51"),
];

/// The math functions: 3.35, but only in builds that enable them, which not every
/// distribution's does.
const MATH_FUNCTIONS: &[&str] = &[
    "acos", "asin", "atan", "atan2", "ceil", "ceiling", "cos", "degrees", "exp", "floor", "ln",
    "log", "log10", "log2", "mod", "pi", "pow", "power", "radians", "sin", "sqrt", "tan", "trunc",
];

/// Word sequences SQLite 3.37.2 does not parse, with the version that brought each.
const NEWER_PHRASES: &[(&[&str], &str)] = &[
    (&["is", "distinct", "from"], "3.39"),
    (&["is", "not", "distinct", "from"], "3.39"),
    (&["right", "join"], "3.39"),
    (&["right", "outer", "join"], "3.39"),
    (&["full", "join"], "3.39"),
    (&["full", "outer", "join"], "3.39"),
];

/// Aggregates whose arguments may end in `ORDER BY` since 3.44.
const ORDERED_AGGREGATES: &[&str] = &[
    "group_concat",
    "string_agg",
    "json_group_array",
    "json_group_object",
];

/// A token of schema text, once its comments and quoted strings and names are gone.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A name or keyword, lowercased; a number.
    Word(String),
    /// Any other character that is not white space.
    Punct(char),
}

/// `sql`'s tokens, with comments, string literals and quoted names left out (a word
/// in them is not SQL), and `->`/`->>` as one punctuation each (`-` then `>`).
fn tokens(sql: &str) -> Vec<Token> {
    // A comment, a quoted string or name (a doubled quote inside is the quote itself;
    // an unclosed one runs to the end), a word or number, or one other character.
    let token = regex::Regex::new(
        r#"(?s)--[^\n]*|/\*.*?(?:\*/|$)|'(?:[^']|'')*'?|"(?:[^"]|"")*"?|`(?:[^`]|``)*`?|\[[^\]]*\]?|[\p{Alphabetic}\p{N}_$]+|\S"#,
    )
    .expect("a valid pattern");
    token
        .find_iter(sql)
        .filter_map(|m| {
            let text = m.as_str();
            let first = text.chars().next()?;
            match first {
                '-' if text.starts_with("--") => None,
                '/' if text.starts_with("/*") => None,
                // A quoted string or name stands in the text as a word no list names.
                '\'' | '"' | '`' | '[' => Some(Token::Word(String::new())),
                c if c.is_alphanumeric() || c == '_' || c == '$' => {
                    Some(Token::Word(text.to_lowercase()))
                }
                c => Some(Token::Punct(c)),
            }
        })
        .collect()
}

/// What of `sql` needs an SQLite newer than 3.37.2, each finding with the version.
fn newer_features(sql: &str) -> Vec<String> {
    let tokens = tokens(sql);
    let word = |at: usize| match tokens.get(at) {
        Some(Token::Word(w)) => Some(w.as_str()),
        _ => None,
    };
    let punct = |at: usize| match tokens.get(at) {
        Some(Token::Punct(p)) => Some(*p),
        _ => None,
    };
    let mut found = Vec::new();
    for at in 0..tokens.len() {
        if punct(at) == Some('-') && punct(at + 1) == Some('>') {
            let op = if punct(at + 2) == Some('>') {
                "->>"
            } else {
                "->"
            };
            found.push(format!("the {op} operator (3.38)"));
        }
        if let Some(w) = word(at) {
            if w.contains('_') && w.starts_with(|c: char| c.is_ascii_digit()) {
                found.push(format!("the number {w} with digit separators (3.46)"));
            }
            for (phrase, version) in NEWER_PHRASES {
                if (0..phrase.len()).all(|k| word(at + k) == Some(phrase[k])) {
                    found.push(format!("{} ({version})", phrase.join(" ")));
                }
            }
            if punct(at + 1) != Some('(') {
                continue;
            }
            if let Some((_, version)) = NEWER_FUNCTIONS.iter().find(|(f, _)| *f == w) {
                found.push(format!("{w}() ({version})"));
            }
            if MATH_FUNCTIONS.contains(&w) {
                found.push(format!("{w}() (a build with math functions)"));
            }
            if w.starts_with("jsonb") {
                found.push(format!("{w}() (3.45)"));
            }
            if ORDERED_AGGREGATES.contains(&w) {
                let mut depth = 0;
                for k in at + 1..tokens.len() {
                    match punct(k) {
                        Some('(') => depth += 1,
                        Some(')') if depth == 1 => break,
                        Some(')') => depth -= 1,
                        _ => {}
                    }
                    if depth == 1 && word(k) == Some("order") && word(k + 1) == Some("by") {
                        found.push(format!("ORDER BY in the arguments of {w}() (3.44)"));
                    }
                }
            }
        }
    }
    found
}

/// The stored text of every object of a database migrated to `version`, by name.
fn schema_text(version: i64) -> Vec<(String, String)> {
    let mut conn = Connection::open_in_memory().unwrap();
    build_reference(&mut conn, version).unwrap();
    let mut stmt = conn
        .prepare("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// Issue 45, item 5: the search view and two delete triggers used `concat_ws` and
/// `->`/`->>`, so Debian's and Python's SQLite could not read the view or delete a
/// message, and Ubuntu 22.04's could not even read the view.
#[test]
fn the_stored_schema_asks_nothing_of_sqlite_newer_than_3_37_2() {
    let newer: Vec<(String, Vec<String>)> = schema_text(latest_version())
        .into_iter()
        .map(|(name, sql)| (name, newer_features(&sql)))
        .filter(|(_, found)| !found.is_empty())
        .collect();
    assert!(newer.is_empty(), "{newer:#?}");
}

/// The scan finds what V14's schema had, and what else it looks for, and nothing in a
/// comment, a string or a quoted name.
#[test]
fn the_scan_finds_what_v14_used_and_each_kind_of_newer_feature() {
    let v14: Vec<(String, Vec<String>)> = schema_text(14)
        .into_iter()
        .map(|(name, sql)| (name, newer_features(&sql)))
        .filter(|(_, found)| !found.is_empty())
        .collect();
    let names: Vec<&str> = v14.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["search_item_delete", "search_message_delete", "search_text"]
    );
    let all: Vec<&String> = v14.iter().flat_map(|(_, f)| f).collect();
    for what in [
        "concat_ws() (3.44)",
        "the -> operator (3.38)",
        "the ->> operator (3.38)",
    ] {
        assert!(all.iter().any(|f| *f == what), "{what} in {all:?}");
    }
    let check = |sql: &str, want: &[&str]| assert_eq!(newer_features(sql), want, "{sql}");
    check(
        "SELECT unixepoch('now'), printf('%d', 1)",
        &["unixepoch() (3.38)"],
    );
    check(
        "SELECT a FROM t RIGHT OUTER JOIN u",
        &["right outer join (3.39)"],
    );
    check(
        "SELECT a IS NOT DISTINCT FROM b",
        &["is not distinct from (3.39)"],
    );
    check(
        "SELECT group_concat(a, ',' ORDER BY b), group_concat(lower(a))",
        &["ORDER BY in the arguments of group_concat() (3.44)"],
    );
    check(
        "SELECT jsonb_extract(x, '$.a') + 1_000",
        &[
            "jsonb_extract() (3.45)",
            "the number 1_000 with digit separators (3.46)",
        ],
    );
    check(
        "CREATE TABLE IF NOT EXISTS t (x CHECK (x -- concat_ws(\n > 0)) /* a->b */",
        &[],
    );
    check(
        "SELECT 'concat_ws(a) -> b', \"format\"(1), [if](2), `concat`(3) FROM t",
        &[],
    );
}

/// `concat_ws(char(10), a, b, c)` as V15 spells it, with `{}` for the row (`old`, `new` or
/// `m`): a CASE on which text comes first, then `||`.
const JOINED: &str = "CASE \
    WHEN {}.display_text IS NOT NULL THEN {}.display_text \
        || coalesce(char(10) || {}.model_text, '') || coalesce(char(10) || {}.transcript, '') \
    WHEN {}.model_text IS NOT NULL THEN {}.model_text || coalesce(char(10) || {}.transcript, '') \
    ELSE coalesce({}.transcript, '') END";

/// `text` with its runs of white space made one space.
fn squeezed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The text a delete trigger hands FTS5 must be byte for byte the text indexed, which
/// V4's trigger and then the store (V7 to V17) wrote with `concat_ws`: V15's spelling
/// gives the same value and type for every mix of NULL, empty, newline-edged and
/// NUL-holding texts (`substr`, which stops at a NUL, would not), and that spelling is
/// the one in V15's view and trigger and in V18's insert trigger.
#[test]
fn v15s_join_of_a_messages_texts_is_what_concat_ws_gave() {
    let v15 = embedded()
        .into_iter()
        .find(|m| m.version() == 15)
        .expect("V15 is embedded");
    let v15 = squeezed(v15.sql().expect("V15 is SQL"));
    for row in ["old", "m"] {
        let spelled = squeezed(&JOINED.replace("{}", row));
        assert!(
            v15.contains(&spelled),
            "V15 joins {row}'s texts as {spelled}"
        );
    }
    let v18 = embedded()
        .into_iter()
        .find(|m| m.version() == 18)
        .expect("V18 is embedded");
    let spelled = squeezed(&JOINED.replace("{}", "new"));
    assert!(
        squeezed(v18.sql().expect("V18 is SQL")).contains(&spelled),
        "V18 joins new's texts as {spelled}"
    );
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(
        "CREATE TABLE v (x);
         INSERT INTO v VALUES (NULL), (''), (char(10)), ('x'), (char(10) || 'x' || char(10)),
             (char(10) || char(10)), ('a' || char(0) || 'b'), (char(0));
         CREATE TABLE m AS SELECT a.x AS display_text, b.x AS model_text, c.x AS transcript
             FROM v a, v b, v c;",
    )
    .unwrap();
    let joined = JOINED.replace("{}", "m");
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM m", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 8 * 8 * 8);
    let differing: Vec<(Option<String>, Option<String>)> = conn
        .prepare(&format!(
            "SELECT hex(concat_ws(char(10), display_text, model_text, transcript)), hex({joined})
               FROM m
              WHERE concat_ws(char(10), display_text, model_text, transcript) IS NOT ({joined})
                 OR length(CAST(concat_ws(char(10), display_text, model_text, transcript) AS BLOB))
                    IS NOT length(CAST(({joined}) AS BLOB))
                 OR typeof(concat_ws(char(10), display_text, model_text, transcript))
                    IS NOT typeof({joined})"
        ))
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(differing, []);
}

/// `(x -> '$.content') ->> '$.type'`, as V12 to V14 read the update an item names, is
/// `json_extract(x, '$.content.type')`, as V15 reads it, for every shape the content
/// may take (and both refuse text that is not JSON).
#[test]
fn v15s_read_of_an_updates_content_is_what_the_arrows_gave() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(
        r#"CREATE TABLE u (x);
           INSERT INTO u VALUES
             ('{"content":{"type":"text","text":"a\nb"}}'),
             ('{"content":{"type":"text","text":""}}'),
             ('{"content":{"type":"text","text":5}}'),
             ('{"content":{"type":"text"}}'),
             ('{"content":{"type":"image","data":"AA=="}}'),
             ('{"content":[{"type":"text","text":"a"}]}'),
             ('{"content":"text"}'),
             ('{"content":null}'),
             ('{"content":7}'),
             ('{"other":1}'),
             ('[]'),
             ('"text"'),
             (NULL);"#,
    )
    .unwrap();
    let differing: i64 = conn
        .query_row(
            "SELECT count(*) FROM u
              WHERE ((x -> '$.content') ->> '$.type') IS NOT json_extract(x, '$.content.type')
                 OR ((x -> '$.content') ->> '$.text') IS NOT json_extract(x, '$.content.text')
                 OR typeof((x -> '$.content') ->> '$.text')
                    IS NOT typeof(json_extract(x, '$.content.text'))",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(differing, 0);
    for query in [
        "SELECT ('{\"content\": ' -> '$.content') ->> '$.type'",
        "SELECT json_extract('{\"content\": ', '$.content.type')",
    ] {
        assert!(
            conn.query_row(query, [], |r| r.get::<_, Option<String>>(0))
                .is_err()
        );
    }
}
