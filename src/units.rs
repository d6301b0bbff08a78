//! How users write durations and sizes — one syntax for every flag and every config key:
//! durations as `250ms`, `30s`, `5m`, `1h`, `1h30m` (a bare number is seconds), sizes as
//! `1048576`, `512K`, `64KiB`, `16MiB`, `1.5GB` (`K`/`M`/`G`/`T` alone and with `iB` are
//! powers of 1024, with `B` powers of 1000).

use serde::Deserialize;

/// A duration in seconds: a bare number, or a number with its unit (`ms`, `s`, `m`/`min`, `h`,
/// `d`; several together, `1h30m`).
pub fn secs(s: &str) -> Result<f64, String> {
    let t = s.trim();
    if let Ok(n) = t.parse::<f64>() {
        return if n.is_finite() && n >= 0.0 {
            Ok(n)
        } else {
            Err(format!("{s:?}: a duration is zero or more"))
        };
    }
    humantime::parse_duration(t)
        .map(|d| d.as_secs_f64())
        .map_err(|_| format!("{s:?} is not a duration (e.g. 250ms, 30s, 5m, 1h, or seconds)"))
}

/// A duration as it is written back: `250ms`, `2s`, `1.5s`.
pub fn show_secs(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        // Two decimals at most (a held message's 1.953579624 s is "1.95s").
        let t = format!("{:.2}", d.as_secs_f64());
        format!("{}s", t.trim_end_matches('0').trim_end_matches('.'))
    }
}

/// A size in bytes (see the module's comment).
pub fn size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 1048576, 512K, 16MiB, 1GB)"))?;
    let unit = unit.trim();
    let mul: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => {
            return Err(format!(
                "{s:?}: unknown size unit {unit:?} (B, K, KiB, KB, M, MiB, MB, G…)"
            ))
        }
    };
    let v = n * mul;
    if !v.is_finite() || v > u64::MAX as f64 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(v.round() as u64)
}

/// [`size`] for a `usize` setting.
pub fn size_usize(s: &str) -> Result<usize, String> {
    size(s).and_then(|n| usize::try_from(n).map_err(|_| format!("{s:?} is out of range")))
}

/// A config key's value: a number, or a string in the flags' syntax.
#[derive(Deserialize)]
#[serde(untagged)]
enum NumOrText {
    Num(f64),
    Text(String),
}

/// Deserializes an optional duration key (`grace_secs = 30` or `grace_secs = "30s"`).
pub fn de_secs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match Option::<NumOrText>::deserialize(d)? {
        None => Ok(None),
        Some(NumOrText::Num(n)) => secs(&n.to_string()).map(Some),
        Some(NumOrText::Text(t)) => secs(&t).map(Some),
    }
    .map_err(serde::de::Error::custom)
}

fn de_size_f<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<NumOrText>::deserialize(d)? {
        None => Ok(None),
        Some(NumOrText::Num(n)) if n >= 0.0 && n.fract() == 0.0 => Ok(Some(n as u64)),
        Some(NumOrText::Num(n)) => Err(format!("{n} is not a whole number of bytes")),
        Some(NumOrText::Text(t)) => size(&t).map(Some),
    }
    .map_err(serde::de::Error::custom)
}

/// Deserializes an optional size key (`max_frame_bytes = 1048576` or `"16MiB"`).
pub fn de_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_size_f(d)
}

/// [`de_size`] for a `usize` key.
pub fn de_size_usize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    de_size_f(d)?
        .map(|n| usize::try_from(n).map_err(|_| serde::de::Error::custom("out of range")))
        .transpose()
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_show_as_a_person_reads_them() {
        let d = std::time::Duration::from_nanos;
        assert_eq!(show_secs(d(1_953_579_624)), "1.95s");
        assert_eq!(show_secs(d(1_500_000_000)), "1.5s");
        assert_eq!(show_secs(d(2_000_000_000)), "2s");
        assert_eq!(show_secs(d(250_000_000)), "250ms");
    }

    use super::*;

    #[test]
    fn durations_as_users_write_them() {
        assert_eq!(secs("30"), Ok(30.0));
        assert_eq!(secs("0.5"), Ok(0.5));
        assert_eq!(secs("30s"), Ok(30.0));
        assert_eq!(secs("250ms"), Ok(0.25));
        assert_eq!(secs("5m"), Ok(300.0));
        assert_eq!(secs("1h30m"), Ok(5400.0));
        assert_eq!(secs("30d"), Ok(30.0 * 86400.0));
        assert!(secs("-1").is_err());
        assert!(secs("soon").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn sizes_as_users_write_them() {
        assert_eq!(size("1048576"), Ok(1 << 20));
        assert_eq!(size("512K"), Ok(512 << 10));
        assert_eq!(size("16MiB"), Ok(16 << 20));
        assert_eq!(size("1M"), Ok(1 << 20));
        assert_eq!(size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(size("2 GiB"), Ok(2 << 30));
        assert!(size("12 parsecs")
            .unwrap_err()
            .contains("unknown size unit"));
        assert!(size("lots").is_err());
    }

    #[test]
    fn config_keys_take_numbers_and_the_flags_syntax() {
        #[derive(serde::Deserialize)]
        struct K {
            #[serde(default, deserialize_with = "de_secs")]
            t: Option<f64>,
            #[serde(default, deserialize_with = "de_size_usize")]
            b: Option<usize>,
        }
        let k: K = toml::from_str("t = \"5m\"\nb = \"16MiB\"").unwrap();
        assert_eq!((k.t, k.b), (Some(300.0), Some(16 << 20)));
        let k: K = toml::from_str("t = 30\nb = 1024").unwrap();
        assert_eq!((k.t, k.b), (Some(30.0), Some(1024)));
        let k: K = toml::from_str("").unwrap();
        assert_eq!((k.t, k.b), (None, None));
        assert!(toml::from_str::<K>("t = \"soon\"").is_err());
    }
}
