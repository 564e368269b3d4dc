//! The builders' setters: most builder methods only store their argument in
//! a field and hand the builder back, and this is their one definition.

/// Defines, for each `name(arg: Type) => field;`, a builder method
/// `pub fn name(mut self, arg: Type) -> Self` that stores `arg` in `field`
/// (a path such as `raw.window`) and returns the builder;
/// `=> field = expression;` stores the expression of `arg` instead.
/// Attributes and doc comments go on the method.
macro_rules! setters {
    ($(
        $(#[$attr:meta])*
        $name:ident($arg:ident: $ty:ty) => $($field:ident).+ $(= $value:expr)?;
    )*) => {
        $(
            $(#[$attr])*
            pub fn $name(mut self, $arg: $ty) -> Self {
                self.$($field).+ = setters!(@value $arg $(, $value)?);
                self
            }
        )*
    };
    (@value $arg:ident) => {
        $arg
    };
    (@value $arg:ident, $value:expr) => {
        $value
    };
}
