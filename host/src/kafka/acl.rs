//! SCRAM credentials and ACLs through the Kafka Admin API (`AlterUserScramCredentials`,
//! `CreateAcls`, `DeleteAcls`), which rust-rdkafka (0.39) does not wrap: librdkafka's calls
//! through `rdkafka-sys`, behind safe methods of [`Admin`]. `weir serve` uses them to give each
//! tenant a principal of its own ([`crate::server::principals`]).
//!
//! Each method sends one request and waits up to [`REQUEST_TIMEOUT`] for its answer (it blocks:
//! call it off the async runtime's threads). The server's principal needs `Alter` on the cluster.

use std::ffi::{CStr, CString, c_char};
use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdsys::rd_kafka_resp_err_t::{RD_KAFKA_RESP_ERR_NO_ERROR, RD_KAFKA_RESP_ERR_RESOURCE_NOT_FOUND};

use super::Admin;

/// How long one request may take before it is an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// SCRAM iterations of a credential Weir creates (Kafka accepts 4096 to 16384).
const SCRAM_ITERATIONS: i32 = 8192;

/// A SCRAM mechanism (`sasl.mechanism`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramMechanism {
    /// `SCRAM-SHA-256`.
    Sha256,
    /// `SCRAM-SHA-512`.
    Sha512,
}

impl ScramMechanism {
    /// The mechanism named `name` (`SCRAM-SHA-256` or `SCRAM-SHA-512`, any case).
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_uppercase().as_str() {
            "SCRAM-SHA-256" => Some(Self::Sha256),
            "SCRAM-SHA-512" => Some(Self::Sha512),
            _ => None,
        }
    }

    /// Its name, as `sasl.mechanism` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha256 => "SCRAM-SHA-256",
            Self::Sha512 => "SCRAM-SHA-512",
        }
    }

    fn native(self) -> rdsys::rd_kafka_ScramMechanism_t {
        match self {
            Self::Sha256 => rdsys::rd_kafka_ScramMechanism_t::RD_KAFKA_SCRAM_MECHANISM_SHA_256,
            Self::Sha512 => rdsys::rd_kafka_ScramMechanism_t::RD_KAFKA_SCRAM_MECHANISM_SHA_512,
        }
    }
}

/// The kind of resource an ACL is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclResource {
    /// Topics.
    Topic,
    /// Consumer groups.
    Group,
    /// Transactional ids.
    TransactionalId,
}

/// An operation an ACL allows (Kafka's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclOperation {
    /// `Read`.
    Read,
    /// `Write`.
    Write,
    /// `Create`.
    Create,
    /// `Describe`.
    Describe,
    /// `DescribeConfigs`.
    DescribeConfigs,
}

/// An ACL allowing `operation` on every resource of kind `resource` whose name starts with
/// `prefix` (pattern type `PREFIXED`), from any host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixedAcl {
    /// The kind of resource.
    pub resource: AclResource,
    /// The names' prefix, e.g. `acme.`.
    pub prefix: String,
    /// The operation allowed.
    pub operation: AclOperation,
}

impl Admin {
    /// Creates (or replaces) the SCRAM credential of each `(user, password)` for `mechanism`,
    /// with a random salt, in one request.
    ///
    /// # Errors
    /// When the cluster cannot be reached, or refuses a credential (the message names the user).
    pub fn upsert_scram(&self, mechanism: ScramMechanism, users: &[(&str, &str)]) -> anyhow::Result<()> {
        let names = users.iter().map(|(user, _)| c_string(user)).collect::<anyhow::Result<Vec<_>>>()?;
        // SAFETY: the alterations are built from live C strings and password slices (copied by
        // librdkafka), handed to the request, and destroyed here after its answer.
        unsafe {
            let mut alterations: Vec<_> = names
                .iter()
                .zip(users)
                .map(|(name, (_, password))| {
                    rdsys::rd_kafka_UserScramCredentialUpsertion_new(
                        name.as_ptr(),
                        mechanism.native(),
                        SCRAM_ITERATIONS,
                        password.as_ptr(),
                        password.len(),
                        std::ptr::null(),
                        0,
                    )
                })
                .collect();
            let answer = self.request("creating SCRAM credentials", |client, options, queue| {
                rdsys::rd_kafka_AlterUserScramCredentials(
                    client,
                    alterations.as_mut_ptr(),
                    alterations.len(),
                    options,
                    queue,
                );
            });
            rdsys::rd_kafka_UserScramCredentialAlteration_destroy_array(alterations.as_mut_ptr(), alterations.len());
            scram_outcome(&answer?, "creating the SCRAM credential of user", false)
        }
    }

    /// Deletes `user`'s SCRAM credential for `mechanism`; a user without one is no error.
    ///
    /// # Errors
    /// When the cluster cannot be reached or refuses.
    pub fn delete_scram(&self, mechanism: ScramMechanism, user: &str) -> anyhow::Result<()> {
        let name = c_string(user)?;
        // SAFETY: as in `upsert_scram`.
        unsafe {
            let mut deletion = [rdsys::rd_kafka_UserScramCredentialDeletion_new(name.as_ptr(), mechanism.native())];
            let answer = self.request("deleting a SCRAM credential", |client, options, queue| {
                rdsys::rd_kafka_AlterUserScramCredentials(client, deletion.as_mut_ptr(), 1, options, queue);
            });
            rdsys::rd_kafka_UserScramCredentialAlteration_destroy_array(deletion.as_mut_ptr(), 1);
            scram_outcome(&answer?, "deleting the SCRAM credential of user", true)
        }
    }

    /// Creates `acls` (each allowing its operation to `principal`, e.g. `User:weir-acme-1234`),
    /// in one request; an ACL that exists already is no error.
    ///
    /// # Errors
    /// When the cluster cannot be reached, or refuses an ACL (the message names it).
    pub fn create_acls(&self, principal: &str, acls: &[PrefixedAcl]) -> anyhow::Result<()> {
        let principal = c_string(principal)?;
        let host = c_string("*")?;
        let prefixes = acls.iter().map(|acl| c_string(&acl.prefix)).collect::<anyhow::Result<Vec<_>>>()?;
        // SAFETY: the bindings are built from live C strings (copied by librdkafka), handed to
        // the request, and destroyed here after its answer; the results belong to the event.
        unsafe {
            let mut bindings = Vec::with_capacity(acls.len());
            for (acl, prefix) in acls.iter().zip(&prefixes) {
                let mut reason = [0 as c_char; 512];
                let binding = rdsys::rd_kafka_AclBinding_new(
                    resource_type(acl.resource),
                    prefix.as_ptr(),
                    rdsys::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_PREFIXED,
                    principal.as_ptr(),
                    host.as_ptr(),
                    operation(acl.operation),
                    rdsys::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW,
                    reason.as_mut_ptr(),
                    reason.len(),
                );
                if binding.is_null() {
                    rdsys::rd_kafka_AclBinding_destroy_array(bindings.as_mut_ptr(), bindings.len());
                    anyhow::bail!("the ACL {acl:?} is not valid: {}", text(reason.as_ptr()));
                }
                bindings.push(binding);
            }
            let answer = self.request("creating ACLs", |client, options, queue| {
                rdsys::rd_kafka_CreateAcls(client, bindings.as_mut_ptr(), bindings.len(), options, queue);
            });
            rdsys::rd_kafka_AclBinding_destroy_array(bindings.as_mut_ptr(), bindings.len());
            let answer = answer?;
            let result = rdsys::rd_kafka_event_CreateAcls_result(answer.0);
            let mut count = 0;
            let results = rdsys::rd_kafka_CreateAcls_result_acls(result, &mut count);
            for (index, acl) in acls.iter().enumerate().take(count) {
                if let Some(why) = refused(rdsys::rd_kafka_acl_result_error(*results.add(index))) {
                    anyhow::bail!("the cluster refuses to create the ACL {acl:?}: {why}");
                }
            }
            Ok(())
        }
    }

    /// Deletes every ACL of `principal` (any resource, pattern, operation and permission);
    /// returns how many there were.
    ///
    /// # Errors
    /// When the cluster cannot be reached or refuses.
    pub fn delete_acls(&self, principal: &str) -> anyhow::Result<usize> {
        let name = c_string(principal)?;
        // SAFETY: the filter is built from a live C string, handed to the request, and destroyed
        // here after its answer; the responses belong to the event.
        unsafe {
            let mut reason = [0 as c_char; 512];
            let filter = rdsys::rd_kafka_AclBindingFilter_new(
                rdsys::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_ANY,
                std::ptr::null(),
                rdsys::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_ANY,
                name.as_ptr(),
                std::ptr::null(),
                rdsys::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_ANY,
                rdsys::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ANY,
                reason.as_mut_ptr(),
                reason.len(),
            );
            if filter.is_null() {
                anyhow::bail!("no ACL filter for principal {principal}: {}", text(reason.as_ptr()));
            }
            let mut filters = [filter];
            let answer = self.request("deleting ACLs", |client, options, queue| {
                rdsys::rd_kafka_DeleteAcls(client, filters.as_mut_ptr(), 1, options, queue);
            });
            rdsys::rd_kafka_AclBinding_destroy(filter);
            let answer = answer?;
            let result = rdsys::rd_kafka_event_DeleteAcls_result(answer.0);
            let mut count = 0;
            let responses = rdsys::rd_kafka_DeleteAcls_result_responses(result, &mut count);
            let mut deleted = 0;
            for index in 0..count {
                let response = *responses.add(index);
                if let Some(why) = refused(rdsys::rd_kafka_DeleteAcls_result_response_error(response)) {
                    anyhow::bail!("the cluster refuses to delete the ACLs of {principal}: {why}");
                }
                let mut matching = 0;
                rdsys::rd_kafka_DeleteAcls_result_response_matching_acls(response, &mut matching);
                deleted += matching;
            }
            Ok(deleted)
        }
    }

    /// Sends one request (`submit` gets the client, options with the request timeout, and the
    /// queue its answer goes to) and waits for the answer.
    ///
    /// # Safety
    /// `submit` must start exactly one admin request on the queue it is given.
    unsafe fn request(
        &self,
        what: &str,
        submit: impl FnOnce(*mut rdsys::rd_kafka_t, *const rdsys::rd_kafka_AdminOptions_t, *mut rdsys::rd_kafka_queue_t),
    ) -> anyhow::Result<Answer> {
        let timeout = REQUEST_TIMEOUT.as_millis() as i32;
        // SAFETY: the options and queue live until the answer has arrived (or the wait ended).
        unsafe {
            let client = self.native_ptr();
            let options = rdsys::rd_kafka_AdminOptions_new(client, rdsys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_ANY);
            let mut reason = [0 as c_char; 512];
            rdsys::rd_kafka_AdminOptions_set_request_timeout(options, timeout, reason.as_mut_ptr(), reason.len());
            let queue = rdsys::rd_kafka_queue_new(client);
            submit(client, options, queue);
            let event = rdsys::rd_kafka_queue_poll(queue, timeout + 1000);
            rdsys::rd_kafka_queue_destroy(queue);
            rdsys::rd_kafka_AdminOptions_destroy(options);
            if event.is_null() {
                anyhow::bail!("{what}: no answer from {} within {} s", self.brokers(), REQUEST_TIMEOUT.as_secs());
            }
            let answer = Answer(event);
            if rdsys::rd_kafka_event_error(event) != RD_KAFKA_RESP_ERR_NO_ERROR {
                anyhow::bail!("{what} failed: {}", text(rdsys::rd_kafka_event_error_string(event)));
            }
            Ok(answer)
        }
    }
}

/// An admin request's answer, destroyed on drop.
struct Answer(*mut rdsys::rd_kafka_event_t);

impl Drop for Answer {
    fn drop(&mut self) {
        // SAFETY: the event came from `rd_kafka_queue_poll` and is destroyed once.
        unsafe { rdsys::rd_kafka_event_destroy(self.0) }
    }
}

/// The outcome of an `AlterUserScramCredentials` answer: the first user refused, if any
/// (`missing_ok`: a deletion of a credential that does not exist is no refusal).
///
/// # Safety
/// `answer` is an `AlterUserScramCredentials` answer.
unsafe fn scram_outcome(answer: &Answer, what: &str, missing_ok: bool) -> anyhow::Result<()> {
    // SAFETY: the responses belong to the answer, which outlives this function's reads.
    unsafe {
        let result = rdsys::rd_kafka_event_AlterUserScramCredentials_result(answer.0);
        let mut count = 0;
        let responses = rdsys::rd_kafka_AlterUserScramCredentials_result_responses(result, &mut count);
        for index in 0..count {
            let response = *responses.add(index);
            let error = rdsys::rd_kafka_AlterUserScramCredentials_result_response_error(response);
            if missing_ok
                && !error.is_null()
                && rdsys::rd_kafka_error_code(error) == RD_KAFKA_RESP_ERR_RESOURCE_NOT_FOUND
            {
                continue;
            }
            if let Some(why) = refused(error) {
                let user = text(rdsys::rd_kafka_AlterUserScramCredentials_result_response_user(response));
                anyhow::bail!("{what} {user}: {why}");
            }
        }
        Ok(())
    }
}

/// The message of `error`, or `None` when it is no error.
///
/// # Safety
/// `error` is null or a live `rd_kafka_error_t`.
unsafe fn refused(error: *const rdsys::rd_kafka_error_t) -> Option<String> {
    // SAFETY: checked for null; the string belongs to the error.
    unsafe {
        if error.is_null() || rdsys::rd_kafka_error_code(error) == RD_KAFKA_RESP_ERR_NO_ERROR {
            return None;
        }
        Some(text(rdsys::rd_kafka_error_string(error)))
    }
}

/// A C string as Rust text (empty for null).
///
/// # Safety
/// `text` is null or a live NUL-terminated string.
unsafe fn text(text: *const c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    // SAFETY: as the caller promises.
    unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
}

fn c_string(value: &str) -> anyhow::Result<CString> {
    CString::new(value).map_err(|_| anyhow::anyhow!("{value:?} contains a NUL byte"))
}

fn resource_type(resource: AclResource) -> rdsys::rd_kafka_ResourceType_t {
    use rdsys::rd_kafka_ResourceType_t as Type;
    match resource {
        AclResource::Topic => Type::RD_KAFKA_RESOURCE_TOPIC,
        AclResource::Group => Type::RD_KAFKA_RESOURCE_GROUP,
        AclResource::TransactionalId => Type::RD_KAFKA_RESOURCE_TRANSACTIONAL_ID,
    }
}

fn operation(operation: AclOperation) -> rdsys::rd_kafka_AclOperation_t {
    use rdsys::rd_kafka_AclOperation_t as Operation;
    match operation {
        AclOperation::Read => Operation::RD_KAFKA_ACL_OPERATION_READ,
        AclOperation::Write => Operation::RD_KAFKA_ACL_OPERATION_WRITE,
        AclOperation::Create => Operation::RD_KAFKA_ACL_OPERATION_CREATE,
        AclOperation::Describe => Operation::RD_KAFKA_ACL_OPERATION_DESCRIBE,
        AclOperation::DescribeConfigs => Operation::RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS,
    }
}
