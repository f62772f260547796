//! JSON-RPC 2.0 messages kept as the JSON objects they came as, so that fields the
//! proxy does not know survive the trip, and patched in place where it must. No IO.

use serde_json::{Map, Value, json};

/// JSON-RPC's error codes, and ACP's.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// ACP: the resource (a session) is not known.
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
}

#[derive(Debug, Clone, PartialEq)]
pub struct Message(Map<String, Value>);

/// What a message is, by the keys it has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind<'a> {
    Request { id: &'a Value, method: &'a str },
    Notification { method: &'a str },
    Response { id: &'a Value },
}

/// Why a frame is not a message: the JSON-RPC error the peer is answered with.
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    pub code: i64,
    pub message: String,
    /// The id of a request that was readable as far as its id, so the answer can name it.
    pub id: Value,
}

impl Message {
    /// Reads one frame: a parse error if it is not JSON, an invalid request if it is not
    /// a request, a notification or a response.
    pub fn parse(frame: &[u8]) -> Result<Message, Malformed> {
        let value: Value = serde_json::from_slice(frame).map_err(|e| Malformed {
            code: code::PARSE_ERROR,
            message: format!("parse error: {e}"),
            id: Value::Null,
        })?;
        let Value::Object(object) = value else {
            return Err(Malformed {
                code: code::INVALID_REQUEST,
                message: "invalid request: a message must be a JSON object".to_owned(),
                id: Value::Null,
            });
        };
        let message = Message(object);
        let id = message.0.get("id").cloned().unwrap_or(Value::Null);
        let invalid = |what: &str| Malformed {
            code: code::INVALID_REQUEST,
            message: format!("invalid request: {what}"),
            id: id.clone(),
        };
        match (message.0.get("method"), message.0.get("id")) {
            (Some(Value::String(_)), _) => {}
            (Some(_), _) => return Err(invalid("method must be a string")),
            (None, Some(_)) => {
                if !message.0.contains_key("result") && !message.0.contains_key("error") {
                    return Err(invalid("a response needs a result or an error"));
                }
            }
            (None, None) => return Err(invalid("neither a method nor an id")),
        }
        if let Some(id) = message.0.get("id")
            && !matches!(id, Value::Number(_) | Value::String(_) | Value::Null)
        {
            return Err(invalid("id must be a number or a string"));
        }
        Ok(message)
    }

    pub fn kind(&self) -> Kind<'_> {
        let id = self.0.get("id");
        match (self.0.get("method").and_then(Value::as_str), id) {
            (Some(method), Some(id)) => Kind::Request { id, method },
            (Some(method), None) => Kind::Notification { method },
            (None, Some(id)) => Kind::Response { id },
            // `parse` admits no other shape, and the constructors make none.
            (None, None) => Kind::Notification { method: "" },
        }
    }

    pub fn id(&self) -> Option<&Value> {
        self.0.get("id")
    }

    pub fn set_id(&mut self, id: Value) {
        self.0.insert("id".to_owned(), id);
    }

    pub fn params(&self) -> Option<&Value> {
        self.0.get("params")
    }

    pub fn params_mut(&mut self) -> Option<&mut Value> {
        self.0.get_mut("params")
    }

    /// Takes the params out, leaving none.
    pub fn take_params(&mut self) -> Value {
        self.0.remove("params").unwrap_or(Value::Null)
    }

    /// A response's result, or its error object.
    pub fn outcome(&self) -> Result<&Value, &Value> {
        match self.0.get("error") {
            Some(error) => Err(error),
            None => Ok(self.0.get("result").unwrap_or(&Value::Null)),
        }
    }

    /// The `sessionId` a request, notification or result names, if any.
    pub fn session_id(&self) -> Option<&str> {
        self.0
            .get("params")
            .or_else(|| self.0.get("result"))
            .and_then(|v| v.get("sessionId"))
            .and_then(Value::as_str)
    }

    /// Replaces the `sessionId` of the params or the result, where there is one.
    pub fn set_session_id(&mut self, session: &str) {
        for key in ["params", "result"] {
            if let Some(Value::Object(inner)) = self.0.get_mut(key)
                && inner.contains_key("sessionId")
            {
                inner.insert("sessionId".to_owned(), Value::String(session.to_owned()));
            }
        }
    }

    fn object(message: Value) -> Message {
        match message {
            Value::Object(m) => Message(m),
            _ => unreachable!("every constructor writes an object"),
        }
    }

    pub fn request(id: Value, method: &str, params: Value) -> Message {
        Message::object(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
    }

    pub fn notification(method: &str, params: Value) -> Message {
        Message::object(json!({"jsonrpc": "2.0", "method": method, "params": params}))
    }

    pub fn result(id: Value, result: Value) -> Message {
        Message::object(json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }

    pub fn error(id: Value, code: i64, message: impl Into<String>) -> Message {
        Message::error_object(id, json!({"code": code, "message": message.into()}))
    }

    /// A response carrying `error` as it is (an error relayed from a peer).
    pub fn error_object(id: Value, error: Value) -> Message {
        Message::object(json!({"jsonrpc": "2.0", "id": id, "error": error}))
    }

    /// The message as one line of JSON, without its line ending.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.0).expect("a JSON object always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Message, Malformed> {
        Message::parse(text.as_bytes())
    }

    #[test]
    fn the_three_kinds_are_told_apart() {
        let request = parse(r#"{"jsonrpc":"2.0","id":7,"method":"session/new","params":{}}"#)
            .expect("a request");
        assert_eq!(
            request.kind(),
            Kind::Request {
                id: &json!(7),
                method: "session/new"
            }
        );
        let note = parse(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{}}"#)
            .expect("a notification");
        assert_eq!(
            note.kind(),
            Kind::Notification {
                method: "session/cancel"
            }
        );
        let response = parse(r#"{"jsonrpc":"2.0","id":"a","result":null}"#).expect("a response");
        assert_eq!(response.kind(), Kind::Response { id: &json!("a") });
        assert_eq!(response.outcome(), Ok(&Value::Null));
    }

    #[test]
    fn unknown_fields_survive_a_patch() {
        let mut m = parse(
            r#"{"jsonrpc":"2.0","id":1,"method":"x/y","params":{"sessionId":"a","later":{"k":[1]}},"extra":true}"#,
        )
        .expect("a request");
        m.set_session_id("b");
        m.set_id(json!(99));
        let back: Value = serde_json::from_slice(&m.to_bytes()).expect("valid JSON");
        assert_eq!(
            back,
            json!({"jsonrpc":"2.0","id":99,"method":"x/y","params":{"sessionId":"b","later":{"k":[1]}},"extra":true})
        );
    }

    #[test]
    fn a_session_id_is_found_in_params_or_result() {
        let m = parse(r#"{"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1","modes":null}}"#)
            .expect("a response");
        assert_eq!(m.session_id(), Some("s1"));
        let n = parse(r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s2"}}"#)
            .expect("a notification");
        assert_eq!(n.session_id(), Some("s2"));
    }

    #[test]
    fn malformed_frames_get_the_jsonrpc_errors() {
        assert_eq!(parse("{not json").unwrap_err().code, code::PARSE_ERROR);
        assert_eq!(parse("[1,2]").unwrap_err().code, code::INVALID_REQUEST);
        let no_method = parse(r#"{"jsonrpc":"2.0","id":3}"#).unwrap_err();
        assert_eq!(no_method.code, code::INVALID_REQUEST);
        assert_eq!(no_method.id, json!(3));
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":{"x":1},"method":"a"}"#)
                .unwrap_err()
                .code,
            code::INVALID_REQUEST
        );
    }
}
