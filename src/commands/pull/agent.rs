//! The HTTP agent `shepherd pull` downloads with: [`crate::backend::http`]'s
//! timeouts stretched for a large model, `Accept-Encoding: identity`, and a
//! last connector link that notes each response head's `Content-Encoding`
//! before ureq reads it, so that a compressed body is refused, never stored.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, DefaultConnector, NextTimeout, Transport,
};

use crate::backend::http::Limits;

/// An agent like [`crate::backend::http::build_agent`]'s whose connections note each response
/// head's `Content-Encoding` in `encoding` before ureq reads (and, for gzip,
/// decodes and hides) it.
pub(super) fn agent(url: &str, encoding: Arc<Mutex<Option<String>>>) -> ureq::Agent {
    let limits = Limits {
        // A large model over a slow link: only silence ends it.
        overall: Duration::from_secs(7 * 24 * 3600),
        ..Limits::default()
    };
    let config = ureq::Agent::config_builder()
        .timeout_connect(Some(limits.connect))
        .timeout_per_read(Some(limits.per_read))
        .timeout_global(Some(limits.overall))
        .http_status_as_error(false)
        .accept_encoding("identity");
    let config = match crate::util::net::is_loopback_url(url) {
        true => config.proxy(None),
        false => config,
    };
    let connector = DefaultConnector::new().chain(HeadReader { encoding });
    ureq::Agent::with_parts(config.build(), connector, DefaultResolver::default())
}

/// The last link of the connector chain (after TLS): wraps each connection in
/// a [`HeadReading`].
#[derive(Debug)]
struct HeadReader {
    encoding: Arc<Mutex<Option<String>>>,
}

impl Connector<Box<dyn Transport>> for HeadReader {
    type Out = HeadReading;

    fn connect(
        &self,
        _: &ConnectionDetails,
        chained: Option<Box<dyn Transport>>,
    ) -> Result<Option<HeadReading>, ureq::Error> {
        Ok(chained.map(|inner| HeadReading {
            inner,
            encoding: self.encoding.clone(),
            in_head: false,
        }))
    }
}

/// A connection that, after each request it sends, reads the response head's
/// `Content-Encoding` from the bytes received (ureq parses a head only once
/// it is whole, so the buffer holds it from its first byte).
#[derive(Debug)]
struct HeadReading {
    inner: Box<dyn Transport>,
    encoding: Arc<Mutex<Option<String>>>,
    /// A request went out and its response head has not been seen whole.
    in_head: bool,
}

impl Transport for HeadReading {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.in_head = true;
        self.inner.transmit_output(amount, timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let more = self.inner.await_input(timeout)?;
        if self.in_head {
            let input = self.inner.buffers().input();
            if let Some(end) = input.windows(4).position(|w| w == b"\r\n\r\n") {
                self.in_head = false;
                let found = head_encoding(&input[..end]);
                if let Ok(mut slot) = self.encoding.lock() {
                    *slot = found;
                }
            }
        }
        Ok(more)
    }

    fn is_open(&mut self) -> bool {
        self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}

/// The `Content-Encoding` values in a raw response head, joined; `None` when absent.
pub(super) fn head_encoding(head: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(head);
    let values: Vec<&str> = head
        .split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| name.trim().eq_ignore_ascii_case("content-encoding"))
        .map(|(_, value)| value.trim())
        .collect();
    (!values.is_empty()).then(|| values.join(", "))
}
