//! `NoVal<T>`: Slurm's `*_no_val_struct` (`{"set":..,"infinite":..,"number":..}`).

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::marker::PhantomData;

/// A Slurm number that may be unset (`NO_VAL`) or infinite (`INFINITE`).
///
/// Serialised as `{"set":bool,"infinite":bool,"number":N}`; decoding also accepts a bare
/// number (as older data parsers and some fields send) and `null` (unset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NoVal<T> {
    /// Not set (Slurm's `NO_VAL`).
    #[default]
    Unset,
    /// Unlimited (Slurm's `INFINITE`).
    Infinite,
    /// A concrete value.
    Set(T),
}

impl<T: Copy> NoVal<T> {
    /// The value when it is set.
    pub fn get(&self) -> Option<T> {
        match self {
            NoVal::Set(v) => Some(*v),
            _ => None,
        }
    }
}

impl<T> NoVal<T> {
    /// True when neither set nor infinite.
    pub fn is_unset(&self) -> bool {
        matches!(self, NoVal::Unset)
    }
    /// True when infinite.
    pub fn is_infinite(&self) -> bool {
        matches!(self, NoVal::Infinite)
    }
}

impl<T> From<T> for NoVal<T> {
    fn from(v: T) -> Self {
        NoVal::Set(v)
    }
}

impl<T> From<Option<T>> for NoVal<T> {
    fn from(v: Option<T>) -> Self {
        v.map_or(NoVal::Unset, NoVal::Set)
    }
}

impl<T: Serialize> Serialize for NoVal<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("NoVal", 3)?;
        match self {
            NoVal::Unset => {
                st.serialize_field("set", &false)?;
                st.serialize_field("infinite", &false)?;
            }
            NoVal::Infinite => {
                st.serialize_field("set", &false)?;
                st.serialize_field("infinite", &true)?;
            }
            NoVal::Set(v) => {
                st.serialize_field("set", &true)?;
                st.serialize_field("infinite", &false)?;
                st.serialize_field("number", v)?;
            }
        }
        st.end()
    }
}

/// Numbers a `NoVal` can carry; decoding goes through `f64`/`i64`/`u64` and checks the range.
pub trait NoValNumber: Sized + Copy {
    /// Convert from an unsigned JSON number.
    fn from_u64(v: u64) -> Option<Self>;
    /// Convert from a signed JSON number.
    fn from_i64(v: i64) -> Option<Self>;
    /// Convert from a floating JSON number.
    fn from_f64(v: f64) -> Option<Self>;
}

macro_rules! int_noval {
    ($($t:ty),*) => {$(
        impl NoValNumber for $t {
            fn from_u64(v: u64) -> Option<Self> { <$t>::try_from(v).ok() }
            fn from_i64(v: i64) -> Option<Self> { <$t>::try_from(v).ok() }
            fn from_f64(v: f64) -> Option<Self> {
                if v.fract() == 0.0 && v >= <$t>::MIN as f64 && v <= <$t>::MAX as f64 { Some(v as $t) } else { None }
            }
        }
    )*};
}
int_noval!(u16, u32, u64, i32, i64);

impl NoValNumber for f64 {
    fn from_u64(v: u64) -> Option<Self> {
        Some(v as f64)
    }
    fn from_i64(v: i64) -> Option<Self> {
        Some(v as f64)
    }
    fn from_f64(v: f64) -> Option<Self> {
        Some(v)
    }
}

impl<'de, T: NoValNumber> Deserialize<'de> for NoVal<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoValVisitor(PhantomData))
    }
}

struct NoValVisitor<T>(PhantomData<T>);

fn num<T: NoValNumber, E: de::Error>(v: Option<T>, raw: &dyn fmt::Display) -> Result<T, E> {
    v.ok_or_else(|| E::custom(format_args!("number {raw} out of range")))
}

impl<'de, T: NoValNumber> Visitor<'de> for NoValVisitor<T> {
    type Value = NoVal<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number or a {\"set\",\"infinite\",\"number\"} object")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        num(T::from_u64(v), &v).map(NoVal::Set)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        num(T::from_i64(v), &v).map(NoVal::Set)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        num(T::from_f64(v), &v).map(NoVal::Set)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(NoVal::Unset)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(NoVal::Unset)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut set = None::<bool>;
        let mut infinite = false;
        let mut number = None::<NoVal<T>>;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "set" => set = Some(map.next_value()?),
                "infinite" => infinite = map.next_value()?,
                "number" => number = Some(map.next_value::<NoVal<T>>()?),
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        if infinite {
            return Ok(NoVal::Infinite);
        }
        // An object with a number but no "set" key counts as set.
        match (set, number) {
            (Some(false), _) | (_, None) => Ok(NoVal::Unset),
            (_, Some(n)) => Ok(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::NoVal;
    use serde_json::json;

    #[test]
    fn encodes_the_three_cases() {
        assert_eq!(
            serde_json::to_value(NoVal::Set(7u32)).unwrap(),
            json!({"set": true, "infinite": false, "number": 7})
        );
        assert_eq!(
            serde_json::to_value(NoVal::<u32>::Unset).unwrap(),
            json!({"set": false, "infinite": false})
        );
        assert_eq!(
            serde_json::to_value(NoVal::<u32>::Infinite).unwrap(),
            json!({"set": false, "infinite": true})
        );
    }

    #[test]
    fn decodes_objects_bare_numbers_and_null() {
        let d = |v| serde_json::from_value::<NoVal<u64>>(v).unwrap();
        assert_eq!(
            d(json!({"set": true, "infinite": false, "number": 5})),
            NoVal::Set(5)
        );
        assert_eq!(
            d(json!({"set": false, "infinite": false, "number": 0})),
            NoVal::Unset
        );
        assert_eq!(
            d(json!({"set": false, "infinite": true, "number": 0})),
            NoVal::Infinite
        );
        assert_eq!(d(json!({"number": 9})), NoVal::Set(9));
        assert_eq!(d(json!(42)), NoVal::Set(42));
        assert_eq!(d(json!(null)), NoVal::Unset);
        assert_eq!(
            d(json!({"set": true, "number": 3, "new_field": [1]})),
            NoVal::Set(3)
        );
        assert!(serde_json::from_value::<NoVal<u16>>(json!(70000)).is_err());
        assert!(serde_json::from_value::<NoVal<u32>>(json!(-1)).is_err());
        assert!(serde_json::from_value::<NoVal<u32>>(json!("x")).is_err());
        assert_eq!(
            serde_json::from_value::<NoVal<f64>>(json!({"set": true, "number": 1.5})).unwrap(),
            NoVal::Set(1.5)
        );
    }
}
