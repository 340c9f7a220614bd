//! SCRAM (RFC 5802, with SHA-256 and SHA-512 as RFC 7677 and Kafka's KIP-84 use them): the
//! client's messages, and a server's check of them. The cryptography is OpenSSL's (PBKDF2,
//! HMAC, the hashes, the random nonce); this module only frames the messages. Channel binding
//! is not used (Kafka does not), and names and passwords are taken as they are, without
//! SASLprep.

use super::Mechanism;
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::sign::Signer;

/// The fewest iterations a client accepts from a server (Kafka's own minimum).
pub const MIN_ITERATIONS: u32 = 4096;
/// The most iterations a client accepts: more would let a server make it spin.
const MAX_ITERATIONS: u32 = 1 << 20;

fn digest(mech: Mechanism) -> MessageDigest {
    match mech {
        Mechanism::ScramSha512 => MessageDigest::sha512(),
        _ => MessageDigest::sha256(),
    }
}

/// HMAC of `data` under `key` with the mechanism's hash.
pub fn hmac(mech: Mechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    let key = PKey::hmac(key).expect("any key makes an HMAC key");
    let mut s = Signer::new(digest(mech), &key).expect("the hash is built in");
    s.update(data).expect("HMAC takes any input");
    s.sign_to_vec().expect("HMAC signs")
}

/// The mechanism's hash of `data`.
pub fn hash(mech: Mechanism, data: &[u8]) -> Vec<u8> {
    openssl::hash::hash(digest(mech), data)
        .expect("the hash is built in")
        .to_vec()
}

/// What a server keeps of a password: RFC 5802's StoredKey and ServerKey.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    /// H(ClientKey).
    pub stored_key: Vec<u8>,
    /// HMAC(SaltedPassword, "Server Key").
    pub server_key: Vec<u8>,
    /// HMAC(SaltedPassword, "Client Key"), which only the client keeps.
    client_key: Vec<u8>,
}

/// The keys of `password` with `salt` and `iterations`.
pub fn keys(mech: Mechanism, password: &str, salt: &[u8], iterations: u32) -> Keys {
    let md = digest(mech);
    let mut salted = vec![0u8; md.size()];
    openssl::pkcs5::pbkdf2_hmac(
        password.as_bytes(),
        salt,
        iterations as usize,
        md,
        &mut salted,
    )
    .expect("PBKDF2 takes any input");
    let client_key = hmac(mech, &salted, b"Client Key");
    Keys {
        stored_key: hash(mech, &client_key),
        server_key: hmac(mech, &salted, b"Server Key"),
        client_key,
    }
}

/// A user name as SCRAM writes it (`=` and `,` escaped).
fn escape(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

/// A fresh random nonce.
fn nonce() -> String {
    let mut b = [0u8; 24];
    openssl::rand::rand_bytes(&mut b).expect("the system has randomness");
    openssl::base64::encode_block(&b)
}

/// The attributes of a SCRAM message (`k=v,k=v`), in order.
fn attributes(message: &str) -> impl Iterator<Item = (char, &str)> {
    message.split(',').filter_map(|a| {
        let mut chars = a.chars();
        let k = chars.next()?;
        (chars.next() == Some('=')).then(|| (k, &a[2..]))
    })
}

fn attribute(message: &str, key: char) -> Option<&str> {
    attributes(message).find(|(k, _)| *k == key).map(|(_, v)| v)
}

/// The client's side of one SCRAM exchange.
#[derive(Debug)]
pub struct Client {
    mech: Mechanism,
    password: super::Secret,
    nonce: String,
    first_bare: String,
}

/// What the client expects of the server's last message.
#[derive(Debug)]
pub struct Expected {
    server_signature: Vec<u8>,
}

impl Client {
    /// A client of `user` with `password`, with a fresh nonce.
    pub fn new(mech: Mechanism, user: &str, password: &super::Secret) -> Client {
        Client::with_nonce(mech, user, password, nonce())
    }

    /// A client with the nonce given (for known-answer tests).
    pub fn with_nonce(
        mech: Mechanism,
        user: &str,
        password: &super::Secret,
        nonce: String,
    ) -> Client {
        Client {
            mech,
            password: password.clone(),
            first_bare: format!("n={},r={nonce}", escape(user)),
            nonce,
        }
    }

    /// The client's first message.
    pub fn first(&self) -> String {
        format!("n,,{}", self.first_bare)
    }

    /// The client's final message in answer to the server's first, and what the server's final
    /// message must hold.
    pub fn answer(&self, server_first: &str) -> Result<(String, Expected), String> {
        if let Some(e) = attribute(server_first, 'e') {
            return Err(format!("the server refused: {e}"));
        }
        let nonce = attribute(server_first, 'r').ok_or("the server sent no nonce")?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err("the server's nonce does not extend the client's".to_string());
        }
        let salt = attribute(server_first, 's')
            .and_then(|s| openssl::base64::decode_block(s).ok())
            .ok_or("the server sent no salt")?;
        let iterations: u32 = attribute(server_first, 'i')
            .and_then(|i| i.parse().ok())
            .ok_or("the server sent no iteration count")?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(format!(
                "the server asks for {iterations} iterations, outside {MIN_ITERATIONS}..={MAX_ITERATIONS}"
            ));
        }
        let keys = keys(self.mech, self.password.expose(), &salt, iterations);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{},{server_first},{without_proof}", self.first_bare);
        let signature = hmac(self.mech, &keys.stored_key, auth.as_bytes());
        let proof: Vec<u8> = keys
            .client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let message = format!(
            "{without_proof},p={}",
            openssl::base64::encode_block(&proof)
        );
        let server_signature = hmac(self.mech, &keys.server_key, auth.as_bytes());
        Ok((message, Expected { server_signature }))
    }
}

impl Expected {
    /// Checks the server's final message: it proves the server knows the password.
    pub fn check(&self, server_final: &str) -> Result<(), String> {
        if let Some(e) = attribute(server_final, 'e') {
            return Err(format!("the server refused: {e}"));
        }
        let v = attribute(server_final, 'v')
            .and_then(|v| openssl::base64::decode_block(v).ok())
            .ok_or("the server's final message has no signature")?;
        // memcmp::eq asserts equal lengths: a short answer must be refused, not panic.
        if v.len() == self.server_signature.len() && openssl::memcmp::eq(&v, &self.server_signature)
        {
            Ok(())
        } else {
            Err("the server's signature is wrong: it does not know the password".to_string())
        }
    }
}

/// A server's side of one SCRAM exchange, for a server that keeps [`Keys`] per user.
#[derive(Debug)]
pub struct Server {
    mech: Mechanism,
    keys: Keys,
    user: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

impl Server {
    /// Reads the client's first message; `lookup` gives a user's salt, iteration count and keys.
    /// Returns the exchange and the server's first message.
    pub fn start(
        mech: Mechanism,
        client_first: &str,
        lookup: impl FnOnce(&str) -> Option<(Vec<u8>, u32, Keys)>,
    ) -> Result<(Server, String), String> {
        let bare = client_first
            .strip_prefix("n,,")
            .ok_or("channel binding and authorization ids are not supported")?;
        let user = attribute(bare, 'n')
            .ok_or("no user name")?
            .replace("=2C", ",")
            .replace("=3D", "=");
        let client_nonce = attribute(bare, 'r').ok_or("no nonce")?;
        let (salt, iterations, keys) = lookup(&user).ok_or("unknown user")?;
        let nonce = format!("{client_nonce}{}", self::nonce());
        let server_first = format!(
            "r={nonce},s={},i={iterations}",
            openssl::base64::encode_block(&salt)
        );
        Ok((
            Server {
                mech,
                keys,
                user,
                client_first_bare: bare.to_string(),
                server_first: server_first.clone(),
                nonce,
            },
            server_first,
        ))
    }

    /// The user the exchange is for.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Checks the client's final message; returns the server's final message if the proof
    /// holds.
    pub fn finish(&self, client_final: &str) -> Result<String, String> {
        let (without_proof, proof) = client_final
            .rsplit_once(",p=")
            .ok_or("the final message has no proof")?;
        if attribute(without_proof, 'r') != Some(self.nonce.as_str()) {
            return Err("the nonce does not match".to_string());
        }
        let proof = openssl::base64::decode_block(proof).map_err(|_| "the proof is not base64")?;
        let auth = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let signature = hmac(self.mech, &self.keys.stored_key, auth.as_bytes());
        if proof.len() != signature.len() {
            return Err("the proof has the wrong length".to_string());
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        if !openssl::memcmp::eq(&hash(self.mech, &client_key), &self.keys.stored_key) {
            return Err("wrong password".to_string());
        }
        let v = hmac(self.mech, &self.keys.server_key, auth.as_bytes());
        Ok(format!("v={}", openssl::base64::encode_block(&v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secure::Secret;

    /// RFC 7677, section 3: the SCRAM-SHA-256 exchange of user "user" with password "pencil".
    #[test]
    fn the_rfc_7677_exchange_is_reproduced() {
        let c = Client::with_nonce(
            Mechanism::ScramSha256,
            "user",
            &Secret::new("pencil"),
            "rOprNGfwEbeRWgbNEkqO".to_string(),
        );
        assert_eq!(c.first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                            s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let (client_final, expected) = c.answer(server_first).unwrap();
        assert_eq!(
            client_final,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        expected
            .check("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert!(expected.check("v=AAAA").is_err());
    }

    fn exchange(mech: Mechanism, stored: &str, given: &str, user: &str) -> Result<(), String> {
        let salt = b"salt of the test".to_vec();
        let c = Client::new(mech, user, &Secret::new(given));
        let (server, server_first) = Server::start(mech, &c.first(), |u| {
            (u == user).then(|| (salt.clone(), 4096, keys(mech, stored, &salt, 4096)))
        })?;
        assert_eq!(server.user(), user);
        let (client_final, expected) = c.answer(&server_first)?;
        let server_final = server.finish(&client_final)?;
        expected.check(&server_final)
    }

    #[test]
    fn client_and_server_agree_on_the_right_password_only() {
        for mech in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            exchange(mech, "s3cret", "s3cret", "al,i=ce").unwrap();
            assert_eq!(
                exchange(mech, "s3cret", "guess", "alice").unwrap_err(),
                "wrong password"
            );
        }
    }

    #[test]
    fn a_server_that_asks_for_too_few_iterations_is_refused() {
        let c = Client::new(Mechanism::ScramSha512, "u", &Secret::new("p"));
        let first = c.first();
        let nonce = attribute(&first[3..], 'r').unwrap();
        let err = c.answer(&format!("r={nonce}x,s=c2FsdA==,i=1")).unwrap_err();
        assert!(err.contains("iterations"), "{err}");
    }
}
