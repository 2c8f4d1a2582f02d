//! `other-world`: a component of an unrelated world (`acme:other@0.1.0`, exporting only
//! `run: func() -> u32`, which returns 42). The host must refuse to load it as a transform.

wit_bindgen::generate!({
    inline: r#"
        package acme:other@0.1.0;

        world other {
            export run: func() -> u32;
        }
    "#,
    world: "other",
});

struct Other;

impl Guest for Other {
    fn run() -> u32 {
        42
    }
}

export!(Other);
