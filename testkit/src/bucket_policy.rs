//! A test's own policy on the shared bucket (a denial scoped to its target), put and lifted the
//! same way by every test that needs one; `stack::bucket_policy_lock` keeps those tests apart.

use crate::stack::Stack;

/// Puts `policy` on the bucket, refusing to replace someone else's.
pub async fn put_test_policy(stack: &Stack, policy: &str) {
    if let Some(existing) = stack
        .objects
        .bucket_policy()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    {
        panic!(
            "bucket {} already has a policy; refusing to replace it: {existing}",
            stack.objects.bucket()
        );
    }
    stack
        .objects
        .put_bucket_policy(policy)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Deletes the test's policy and proves the bucket has none left.
pub async fn lift_test_policy(stack: &Stack) {
    stack
        .objects
        .delete_bucket_policy()
        .await
        .unwrap_or_else(|e| panic!("lifting the test policy: {e}"));
    assert_eq!(
        stack
            .objects
            .bucket_policy()
            .await
            .unwrap_or_else(|e| panic!("{e}")),
        None
    );
}
