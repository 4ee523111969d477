//! Logs kept in memory: the writer a test hands a tracing layer (`shared::telemetry::layer(json, closes, move ||
//! capture.clone())`), read back afterwards.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// Everything written to it, shared between its clones.
#[derive(Debug, Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    /// What was written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().expect("log capture lock").clone()).expect("logs are UTF-8")
    }

    /// What was written so far, line by line.
    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(str::to_owned).collect()
    }
}

impl Write for LogCapture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log capture lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
