//! Statements as tokens: splitting a file at its top-level semicolons, and the small token
//! surgery that lets the generic SQL parser read what Flink writes and it does not (a table
//! argument `TABLE t` of a window function, and a session's `PARTITION BY`).

use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Location, Span, Token, TokenWithSpan, Tokenizer, Word};

/// One statement of a file: its tokens (without the semicolon) and where it starts.
#[derive(Debug, Clone)]
pub struct Statement {
    /// The tokens, whitespace and comments left out.
    pub tokens: Vec<Token>,
    /// Where each token is in the file.
    pub spans: Vec<Span>,
    /// The line of its first token (1-based).
    pub line: u64,
}

impl Statement {
    /// Where the statement starts.
    pub fn start(&self) -> Location {
        self.spans
            .first()
            .map_or(Location::new(self.line, 1), |s| s.start)
    }

    /// Tokens `range` of the statement with their locations.
    pub fn located(&self, range: std::ops::Range<usize>) -> Vec<TokenWithSpan> {
        self.tokens[range.clone()]
            .iter()
            .zip(&self.spans[range])
            .map(|(t, s)| TokenWithSpan::new(t.clone(), *s))
            .collect()
    }
}

/// `rewritten` (tokens made from `original`'s by inserting, replacing or dropping a few) with
/// locations: a token kept from `original` keeps its own, an inserted one takes that of the
/// original token at the same place, so a problem found in the rewritten query is reported
/// where the user wrote it.
pub fn relocate(original: &[TokenWithSpan], rewritten: Vec<Token>) -> Vec<TokenWithSpan> {
    let mut at = 0;
    rewritten
        .into_iter()
        .map(|t| {
            let found = original[at.min(original.len())..]
                .iter()
                .take(4)
                .position(|o| o.token == t);
            let span = match found {
                Some(i) => {
                    at += i + 1;
                    original[at - 1].span
                }
                None => original
                    .get(at)
                    .or(original.last())
                    .map_or(Span::empty(), |o| o.span),
            };
            TokenWithSpan::new(t, span)
        })
        .collect()
}

impl Statement {
    /// The statement as text again.
    pub fn text(&self) -> String {
        join(&self.tokens)
    }
}

/// Tokens written back as SQL text, separated by single spaces.
pub fn join(tokens: &[Token]) -> String {
    let mut out = String::new();
    for (i, t) in tokens.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&t.to_string());
    }
    out
}

/// Splits `text` into statements at top-level semicolons; an error names what does not tokenize.
pub fn statements(text: &str) -> Result<Vec<Statement>, String> {
    let tokens: Vec<TokenWithSpan> = Tokenizer::new(&GenericDialect {}, text)
        .tokenize_with_location()
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut current: Vec<Token> = Vec::new();
    let mut spans: Vec<Span> = Vec::new();
    let mut line = 0;
    for t in tokens {
        match t.token {
            Token::Whitespace(_) => continue,
            Token::SemiColon => {
                if !current.is_empty() {
                    out.push(Statement {
                        tokens: std::mem::take(&mut current),
                        spans: std::mem::take(&mut spans),
                        line,
                    });
                }
            }
            tok => {
                if current.is_empty() {
                    line = t.span.start.line;
                }
                current.push(tok);
                spans.push(t.span);
            }
        }
    }
    if !current.is_empty() {
        out.push(Statement {
            tokens: current,
            spans,
            line,
        });
    }
    Ok(out)
}

/// Whether `t` is the keyword `kw`.
pub fn is_kw(t: &Token, kw: Keyword) -> bool {
    matches!(t, Token::Word(Word { keyword, quote_style: None, .. }) if *keyword == kw)
}

/// The name of a word token (unquoted words as written, quoted ones without their quotes).
pub fn word(t: &Token) -> Option<&str> {
    match t {
        Token::Word(w) => Some(w.value.as_str()),
        _ => None,
    }
}

/// Splits `tokens` at the commas outside parentheses and angle brackets (`ROW<a INT, b INT>`).
pub fn split_top_level(tokens: &[Token]) -> Vec<&[Token]> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, t) in tokens.iter().enumerate() {
        match t {
            Token::LParen | Token::Lt => depth += 1,
            Token::RParen | Token::Gt => depth -= 1,
            Token::ShiftRight => depth -= 2,
            Token::Comma if depth == 0 => {
                parts.push(&tokens[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < tokens.len() {
        parts.push(&tokens[start..]);
    }
    parts
}

/// The index of the parenthesis closing the one at `open`.
pub fn closing(tokens: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0;
    for (i, t) in tokens.iter().enumerate().skip(open) {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Rewrites Spark's window forms into what the generic parser reads: `window(` becomes
/// `__spark_window(`, and `window.start`, `window.end` (and `session_window.start`, `.end`)
/// become `window_start`, `window_end`.
pub fn rewrite_spark_windows(tokens: &[Token]) -> Vec<Token> {
    let mut out: Vec<Token> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let w = word(&tokens[i]).map(str::to_ascii_lowercase);
        let is_window = matches!(w.as_deref(), Some("window" | "session_window"));
        if is_window && tokens.get(i + 1) == Some(&Token::Period) {
            if let Some(field @ ("start" | "end")) = tokens
                .get(i + 2)
                .and_then(word)
                .map(str::to_ascii_lowercase)
                .as_deref()
            {
                out.push(Token::make_word(&format!("window_{field}"), None));
                i += 3;
                continue;
            }
        }
        if w.as_deref() == Some("window") && tokens.get(i + 1) == Some(&Token::LParen) {
            out.push(Token::make_word("__spark_window", None));
            i += 1;
            continue;
        }
        out.push(tokens[i].clone());
        i += 1;
    }
    out
}

/// Rewrites Flink's window-function arguments into calls the generic parser reads: a table
/// argument `TABLE t` (after `(`, `,` or `=>`) becomes `t`, and a session's
/// `t PARTITION BY k1, k2` (or `PARTITION BY (k1, k2)`) becomes `t, __partition_by(k1, k2)`.
pub fn rewrite_table_arguments(tokens: &[Token]) -> Vec<Token> {
    let mut out: Vec<Token> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let after_open = matches!(
            out.last(),
            Some(Token::LParen | Token::Comma | Token::RArrow)
        );
        if after_open
            && is_kw(&tokens[i], Keyword::TABLE)
            && word(tokens.get(i + 1).unwrap_or(&Token::EOF)).is_some()
        {
            out.push(tokens[i + 1].clone());
            i += 2;
            if tokens.get(i).is_some_and(|t| is_kw(t, Keyword::PARTITION))
                && tokens.get(i + 1).is_some_and(|t| is_kw(t, Keyword::BY))
            {
                i += 2;
                out.push(Token::Comma);
                out.push(Token::make_word("__partition_by", None));
                out.push(Token::LParen);
                if tokens.get(i) == Some(&Token::LParen) {
                    let end = closing(tokens, i).unwrap_or(tokens.len() - 1);
                    out.extend_from_slice(&tokens[i + 1..end]);
                    i = end + 1;
                } else {
                    // Keys up to the comma before the next argument: `k1, k2, DESCRIPTOR(..)`.
                    while i < tokens.len() && !is_descriptor(&tokens[i]) {
                        if tokens[i] == Token::Comma && tokens.get(i + 1).is_some_and(is_descriptor)
                        {
                            break;
                        }
                        out.push(tokens[i].clone());
                        i += 1;
                    }
                }
                out.push(Token::RParen);
            }
            continue;
        }
        out.push(tokens[i].clone());
        i += 1;
    }
    out
}

fn is_descriptor(t: &Token) -> bool {
    word(t).is_some_and(|w| w.eq_ignore_ascii_case("descriptor"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_split_at_top_level_semicolons_only() {
        let s = statements("SET 'a' = 'x;y';\n\nSELECT 1;\n-- done\n").unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].line, 1);
        assert_eq!(s[1].line, 3);
        assert_eq!(s[0].text(), "SET 'a' = 'x;y'");
    }

    #[test]
    fn table_arguments_become_plain_arguments() {
        let s = statements(
            "SELECT 1 FROM TABLE(SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts), INTERVAL '1' MINUTE))",
        )
        .unwrap();
        let text = join(&rewrite_table_arguments(&s[0].tokens));
        assert_eq!(
            text,
            "SELECT 1 FROM TABLE ( SESSION ( t , __partition_by ( k ) , DESCRIPTOR ( ts ) , INTERVAL '1' MINUTE ) )"
        );
        let s =
            statements("SELECT 1 FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE))")
                .unwrap();
        let text = join(&rewrite_table_arguments(&s[0].tokens));
        assert!(text.contains("TUMBLE ( t , DESCRIPTOR"), "{text}");
    }
}
