//! The SASL exchange on a fresh connection: `SaslHandshake` names the mechanism, then
//! `SaslAuthenticate` carries its messages (KIP-152), as librdkafka does against brokers that
//! support it.

use super::{RawClient, RawLogError};
use crate::secure::scram;
use crate::secure::{ConnectError, Mechanism, Sasl};
use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

/// Kafka's UNSUPPORTED_SASL_MECHANISM.
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
/// `SaslHandshake` version 1: the messages then travel in `SaslAuthenticate` requests.
const HANDSHAKE_VERSION: i16 = 1;
const AUTHENTICATE_VERSION: i16 = 1;

/// Authenticates `client`, connected to `addr`, with `sasl`.
pub(crate) fn authenticate(
    client: &mut RawClient,
    addr: &str,
    sasl: &Sasl,
) -> Result<(), RawLogError> {
    let mechanism = sasl.mechanism.name();
    let broke_off = |e: RawLogError| -> RawLogError {
        ConnectError::Sasl {
            addr: addr.to_string(),
            mechanism,
            message: format!("the exchange broke off: {e}"),
        }
        .into()
    };
    let shook: SaslHandshakeResponse = client
        .request(
            ApiKey::SaslHandshake,
            HANDSHAKE_VERSION,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism)),
        )
        .map_err(broke_off)?;
    if shook.error_code == UNSUPPORTED_SASL_MECHANISM {
        let offered: Vec<&str> = shook.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(ConnectError::Mechanism {
            addr: addr.to_string(),
            wanted: mechanism,
            offered: if offered.is_empty() {
                "none".to_string()
            } else {
                offered.join(", ")
            },
        }
        .into());
    }
    if shook.error_code != 0 {
        return Err(RawLogError::Broker {
            code: shook.error_code,
            what: format!("SASL handshake with {addr}"),
        });
    }
    let mut step = |bytes: Vec<u8>| -> Result<Vec<u8>, RawLogError> {
        let answer: SaslAuthenticateResponse = client
            .request(
                ApiKey::SaslAuthenticate,
                AUTHENTICATE_VERSION,
                &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes)),
            )
            .map_err(broke_off)?;
        if answer.error_code != 0 {
            return Err(ConnectError::Authentication {
                addr: addr.to_string(),
                user: sasl.username.clone(),
                mechanism,
                message: answer.error_message.map_or_else(
                    || format!("error code {}", answer.error_code),
                    |m| m.to_string(),
                ),
            }
            .into());
        }
        Ok(answer.auth_bytes.to_vec())
    };
    match sasl.mechanism {
        Mechanism::Plain => {
            let token = format!("\0{}\0{}", sasl.username, sasl.password.expose());
            step(token.into_bytes())?;
            Ok(())
        }
        Mechanism::ScramSha256 | Mechanism::ScramSha512 => {
            let refused = |message: String| -> RawLogError {
                ConnectError::Sasl {
                    addr: addr.to_string(),
                    mechanism,
                    message,
                }
                .into()
            };
            let c = scram::Client::new(sasl.mechanism, &sasl.username, &sasl.password);
            let server_first = step(c.first().into_bytes())?;
            let server_first = String::from_utf8_lossy(&server_first).into_owned();
            let (client_final, expected) = c.answer(&server_first).map_err(refused)?;
            let server_final = step(client_final.into_bytes())?;
            expected
                .check(&String::from_utf8_lossy(&server_final))
                .map_err(refused)
        }
    }
}
