(** * Cancellation of shared events: THEORY.md section 3, T1, T2, Cor 3.3, M1, M4.

    At a shared event the coefficient of response [i] is [kappa_i = A_i * w_i]; the
    event coefficient is [K = sum_i A_i * w_i] (times the multiplicity [m] when the
    event occurs [m] times in every response). *)

From Coq Require Import QArith Lqa Qfield Lia.
From Exchange Require Import Sums.
Open Scope Q_scope.

(** Event coefficient of a shared event: [K = sum_i A_i * w_i]. *)
Definition K (G : nat) (A w : nat -> Q) : Q := sum G (fun i => A i * w i).

(** Group-mean advantages divided by a group constant [s]: [A_i = (r_i - mean r) / s]. *)
Definition adv (G : nat) (s : Q) (r : nat -> Q) (i : nat) : Q := (r i - mean G r) / s.

(** Binary rewards on the group. *)
Definition binary (G : nat) (r : nat -> Q) : Prop :=
  forall i, (i < G)%nat -> r i == 0 \/ r i == 1.

(** Group-mean advantages are zero-sum (property Z), whatever the scale [s]. *)
Lemma adv_zero_sum : forall G s r, sum G (adv G s r) == 0.
Proof.
  intros G s r. unfold adv, Qdiv.
  rewrite (sum_ext G _ (fun i => / s * (r i - mean G r))) by (intros; ring).
  rewrite sum_scale, sum_centred. ring.
Qed.

Lemma K_scale_adv : forall G s r w,
  K G (adv G s r) w == / s * sum G (fun i => (r i - mean G r) * w i).
Proof.
  intros. unfold K, adv, Qdiv. rewrite <- sum_scale. apply sum_ext; intros; ring.
Qed.

(** ** T1 sufficiency *)

(** Under exchangeability [kappa_i = c * A_i * h] for every one of the [m] occurrences
    in each response, so [K = c * h * m * sum_i A_i]. *)
Theorem T1_event_coefficient : forall G (A : nat -> Q) (c h m : Q),
  sum G (fun i => m * (c * A i * h)) == c * h * m * sum G A.
Proof.
  intros. rewrite <- sum_scale. apply sum_ext; intros; ring.
Qed.

(** T1: zero-sum advantages (Z) and exchangeable coefficients (E) give cancellation (C). *)
Theorem T1_sufficiency_exchangeable : forall G (A : nat -> Q) (c h m : Q),
  sum G A == 0 -> sum G (fun i => m * (c * A i * h)) == 0.
Proof.
  intros G A c h m HZ. rewrite T1_event_coefficient, HZ. ring.
Qed.

(** T1 in weight form: zero-sum advantages and equal weights give [K = 0]. *)
Theorem T1_sufficiency : forall G (A w : nat -> Q) (w0 : Q),
  sum G A == 0 /\
  (forall i, (i < G)%nat -> w i == w0) ->
  K G A w == 0.
Proof.
  uncurried.
  intros G A w w0 HZ Hw. unfold K.
  rewrite (sum_ext G _ (fun i => A i * w0)) by (intros i Hi; rewrite (Hw i Hi); ring).
  rewrite sum_scale_r, HZ. ring.
Qed.

(** ** T2 necessity *)

(** T2 (binary rewards): if [K = 0] for every binary reward vector under group-mean
    advantages divided by any positive group constant [sigma r] (e.g. the std), and the
    weights do not depend on the rewards, then all weights are equal.  The hypothesis
    [G >= 2] of THEORY.md is not needed: for [G = 1] the conclusion is trivial. *)
Theorem T2_necessity_binary : forall (G : nat) (w : nat -> Q) (sigma : (nat -> Q) -> Q),
  (forall r, binary G r -> 0 < sigma r) /\
  (forall r, binary G r -> K G (adv G (sigma r) r) w == 0) ->
  forall i j, (i < G)%nat -> (j < G)%nat -> w i == w j.
Proof.
  uncurried.
  intros G w sigma Hpos HC.
  (* Reward vector e_j: K = (w_j - mean w) / sigma, so every w_j equals mean w. *)
  assert (Hmean : forall j, (j < G)%nat -> w j == mean G w).
  { intros j Hj.
    assert (Hb : binary G (ind j)).
    { intros i _. unfold ind. destruct (Nat.eqb i j); [right|left]; reflexivity. }
    pose proof (Hpos _ Hb) as Hs. pose proof (HC _ Hb) as HK.
    rewrite K_scale_adv in HK.
    assert (Hm : mean G (ind j) == / QG G).
    { unfold mean. rewrite sum_ind_one by exact Hj. field. apply QG_nonzero; lia. }
    rewrite (sum_ext G _ (fun i => ind j i * w i - mean G (ind j) * w i)) in HK
      by (intros; ring).
    rewrite sum_minus, sum_ind, sum_scale, Hm in HK by exact Hj.
    assert (Hz : w j - / QG G * sum G w == 0).
    { assert (Hsne : ~ sigma (ind j) == 0) by lra.
      apply Qmult_integral in HK. destruct HK as [HK|HK]; [|exact HK].
      exfalso. apply Hsne. rewrite <- (Qinv_involutive (sigma (ind j))), HK. reflexivity. }
    unfold mean. assert (~ QG G == 0) by (apply QG_nonzero; lia).
    setoid_replace (sum G w / QG G) with (/ QG G * sum G w) by (field; assumption).
    lra. }
  intros i j Hi Hj. rewrite (Hmean i Hi), (Hmean j Hj). reflexivity.
Qed.

(** T2 (general): if [K = 0] for every zero-sum advantage vector, all weights are equal.
    The vectors [e_i - e_j] are zero-sum and give [K = w_i - w_j]. *)
Theorem T2_necessity_zero_sum : forall (G : nat) (w : nat -> Q),
  (forall A, sum G A == 0 -> K G A w == 0) ->
  forall i j, (i < G)%nat -> (j < G)%nat -> w i == w j.
Proof.
  intros G w HC i j Hi Hj.
  set (A := fun k => ind i k - ind j k).
  assert (HZ : sum G A == 0).
  { unfold A. rewrite sum_minus, sum_ind_one, sum_ind_one by assumption. ring. }
  pose proof (HC A HZ) as HK. unfold K, A in HK.
  rewrite (sum_ext G _ (fun k => ind i k * w k - ind j k * w k)) in HK by (intros; ring).
  rewrite sum_minus, sum_ind, sum_ind in HK by assumption. lra.
Qed.

(** T1 + T2: cancellation for every zero-sum advantage vector holds exactly when the
    weights are equal. *)
Theorem T2_characterisation : forall (G : nat) (w : nat -> Q),
  (forall A, sum G A == 0 -> K G A w == 0) <->
  (forall i j, (i < G)%nat -> (j < G)%nat -> w i == w j).
Proof.
  intros G w. split.
  - apply T2_necessity_zero_sum.
  - intros Heq A HZ. destruct G as [|k].
    + reflexivity.
    + apply (T1_sufficiency (S k) A w (w O)). split; [exact HZ|]. intros i Hi. apply Heq; lia.
Qed.

(** ** Cor 3.3: cancellation for one reward vector does not need equal weights *)

Definition cor33_A (i : nat) : Q := match i with O => 1 | S O => 1 | _ => -2 end.
Definition cor33_w (i : nat) : Q := match i with O => 1 | S O => 3 | _ => 2 end.

Theorem Cor33_cancellation_unequal_weights :
  sum 3 cor33_A == 0 /\ K 3 cor33_A cor33_w == 0 /\ ~ cor33_w 0%nat == cor33_w 1%nat.
Proof.
  split; [|split].
  - vm_compute. reflexivity.
  - vm_compute. reflexivity.
  - vm_compute. discriminate.
Qed.

(** ** M1 lemma: two responses with sequence weights *)

(** The group [(x, y)] of two responses. *)
Definition pair (x y : Q) (i : nat) : Q := match i with O => x | _ => y end.

(** With [A = (a, -a)], [a <> 0], the sequence weights cancel iff [s_1 = s_2]: sequence
    coupling (GSPO) cancels only on the measure-zero set of equal sequence weights. *)
Theorem M1_two_responses : forall a s1 s2 : Q, ~ a == 0 ->
  (K 2 (pair a (- a)) (pair s1 s2) == 0 <-> s1 == s2).
Proof.
  intros a s1 s2 Ha. unfold K; simpl. split.
  - intro H. assert (Hm : a * (s1 - s2) == 0) by lra.
    apply Qmult_integral in Hm. destruct Hm as [Hm|Hm]; [contradiction | lra].
  - intro H. rewrite H. ring.
Qed.

(** ** M4: advantages that are not zero-sum *)

(** With equal weights [w0], [K = w0 * sum_i A_i]: a non-zero-sum baseline (M4) breaks
    cancellation even for perfectly exchangeable coefficients. *)
Theorem M4_nonzero_sum_breaks : forall G (A : nat -> Q) (w0 : Q),
  ~ w0 == 0 /\
  ~ sum G A == 0 ->
  ~ K G A (fun _ => w0) == 0.
Proof.
  uncurried.
  intros G A w0 Hw HA HK. unfold K in HK. rewrite sum_scale_r in HK.
  apply Qmult_integral in HK. destruct HK; contradiction.
Qed.

(** ** Equal rewards give zero coefficients *)

(** If every response has the same reward, group-mean advantages vanish and every
    coefficient [kappa_i = A_i * w_i] is zero, whatever the weights and the scale. *)
Theorem null_on_equal_rewards : forall G s (r w : nat -> Q) (r0 : Q),
  (forall i, (i < G)%nat -> r i == r0) ->
  forall i, (i < G)%nat -> adv G s r i * w i == 0.
Proof.
  intros G s r w r0 Hr i Hi. unfold adv.
  assert (Hm : mean G r == r0).
  { unfold mean. rewrite (sum_ext G r (fun _ => r0)) by exact Hr.
    rewrite <- (mean_const G r0) by lia. reflexivity. }
  rewrite Hm, (Hr i Hi). unfold Qdiv. ring.
Qed.

(** ** M6: an additive event term *)

(** A per-occurrence term [phi] that does not scale with the advantage (a KL or
    [abs(log rho)] penalty on the sampled token) adds [G * phi] to the event coefficient
    of an event occurring once in each of the [G] responses, whatever the advantages:
    with zero-sum advantages and equal weights [K = G * phi], not [0]. *)
Theorem M6_additive_term : forall G (A : nat -> Q) (w0 phi : Q),
  sum G A == 0 -> sum G (fun i => A i * w0 + phi) == QG G * phi.
Proof.
  intros G A w0 phi HZ. rewrite sum_plus, sum_scale_r, sum_const, HZ. ring.
Qed.

Theorem M6_does_not_vanish : forall G (A : nat -> Q) (w0 phi : Q),
  (0 < G)%nat /\
  ~ phi == 0 /\
  sum G A == 0 ->
  ~ sum G (fun i => A i * w0 + phi) == 0.
Proof.
  uncurried.
  intros G A w0 phi HG Hphi HZ HK. rewrite M6_additive_term in HK by exact HZ.
  apply Qmult_integral in HK. destruct HK as [HK|HK]; [|contradiction].
  apply (QG_nonzero G HG), HK.
Qed.

(** ** (E) and its product form (THEORY.md section 2)

    The shared events of a group, of any type [E], each occur in every response [i < G];
    [kappa i e] is the coefficient of event [e] in response [i] (one coefficient per
    response and event: occurrences at different positions of one response are not
    modelled separately).  (E) as THEORY.md defines it: equal ratios [kappa / A] across
    the responses with a non-zero advantage, and [kappa = 0] where [A = 0]. *)
Definition exchangeable {E : Type} (G : nat) (A : nat -> Q) (kappa : nat -> E -> Q) : Prop :=
  (forall e i j, (i < G)%nat -> (j < G)%nat -> ~ A i == 0 -> ~ A j == 0 ->
     kappa i e / A i == kappa j e / A j) /\
  (forall e i, (i < G)%nat -> A i == 0 -> kappa i e == 0).

(** A bounded search, constructively: some advantage is non-zero or all are zero. *)
Lemma some_nonzero_dec : forall G (A : nat -> Q),
  {j | (j < G)%nat /\ ~ A j == 0} + {forall i, (i < G)%nat -> A i == 0}.
Proof.
  induction G as [|G IH]; intros A.
  - right. intros i Hi. lia.
  - destruct (IH A) as [[j [Hj HA]]|Hall].
    + left. exists j. split; [lia|exact HA].
    + destruct (Qeq_dec (A G) 0) as [HG|HG].
      * right. intros i Hi. destruct (Nat.eq_dec i G) as [->|Hne]; [exact HG|].
        apply Hall. lia.
      * left. exists G. split; [lia|exact HG].
Qed.

(** (E) holds iff the coefficients have the product form [kappa i e = A_i * h e], with
    [h] a function of the event alone (THEORY.md's [c_g * h(e)], the group constant
    [c_g] folded into [h]). *)
Theorem E_product_form : forall (E : Type) (G : nat) (A : nat -> Q) (kappa : nat -> E -> Q),
  exchangeable G A kappa <->
  exists h : E -> Q, forall e i, (i < G)%nat -> kappa i e == A i * h e.
Proof.
  intros E G A kappa. split.
  - intros [Hratio Hzero]. destruct (some_nonzero_dec G A) as [[j [Hj HAj]]|Hall].
    + exists (fun e => kappa j e / A j). intros e i Hi.
      destruct (Qeq_dec (A i) 0) as [HAi|HAi].
      * rewrite (Hzero e i Hi HAi), HAi. ring.
      * rewrite <- (Hratio e i j Hi Hj HAi HAj). field. exact HAi.
    + exists (fun _ => 0). intros e i Hi. rewrite (Hzero e i Hi (Hall i Hi)). ring.
  - intros [h Hh]. split.
    + intros e i j Hi Hj HAi HAj. rewrite (Hh e i Hi), (Hh e j Hj). field. split; assumption.
    + intros e i Hi HAi. rewrite (Hh e i Hi), HAi. ring.
Qed.

(** ** M4: OPO's length-weighted baseline is not zero-sum

    OPO's baseline [b = sum_j L_j r_j / sum_j L_j]; advantages [A_i = r_i - b]. *)
Definition opo_adv (G : nat) (L r : nat -> Q) (i : nat) : Q :=
  r i - sum G (fun j => L j * r j) / sum G L.

(** Their sum, times the total length, is [- G] times the (unnormalised) covariance of
    lengths and rewards: zero-sum exactly when lengths and rewards do not co-vary. *)
Theorem M4_opo_sum : forall G (L r : nat -> Q), ~ sum G L == 0 ->
  sum G (opo_adv G L r) * sum G L ==
  - QG G * sum G (fun i => (L i - mean G L) * (r i - mean G r)).
Proof.
  intros G L r HL. unfold opo_adv.
  assert (Hc : sum G (fun i => (L i - mean G L) * (r i - mean G r)) ==
               sum G (fun i => L i * r i) - mean G L * sum G r).
  { rewrite (sum_ext G _ (fun i => L i * r i - (mean G L * r i +
                                   (mean G r * L i - mean G L * mean G r))))
      by (intros; ring).
    rewrite sum_minus, sum_plus, sum_minus, !sum_scale, sum_const.
    destruct G as [|k].
    - simpl. unfold mean, QG. simpl. ring.
    - assert (Hm : mean (S k) r * QG (S k) == sum (S k) r).
      { unfold mean. field. apply QG_nonzero. lia. }
      unfold mean in *. field. apply QG_nonzero. lia. }
  rewrite Hc, sum_minus, sum_const.
  destruct G as [|k].
  - simpl in HL. exfalso. apply HL. reflexivity.
  - unfold mean. field. split; (exact HL || (apply QG_nonzero; lia)).
Qed.

(** Equal lengths: the baseline is the group mean, the advantages are zero-sum. *)
Theorem M4_opo_equal_lengths : forall G (L r : nat -> Q) (l : Q),
  (0 < G)%nat /\
  ~ l == 0 /\
  (forall i, (i < G)%nat -> L i == l) ->
  sum G (opo_adv G L r) == 0.
Proof.
  uncurried.
  intros G L r l HG Hl HL.
  assert (HS : ~ sum G L == 0).
  { rewrite (sum_ext G L (fun _ => l)) by exact HL. rewrite sum_const.
    intro H. apply Qmult_integral in H. destruct H as [H|H]; [|contradiction].
    apply (QG_nonzero G HG), H. }
  assert (H := M4_opo_sum G L r HS).
  rewrite (sum_ext G (fun i => (L i - mean G L) * (r i - mean G r)) (fun _ => 0)) in H.
  - rewrite sum_const in H.
    assert (H0 : sum G (opo_adv G L r) * sum G L == 0 * sum G L) by (rewrite H; ring).
    apply Qmult_inj_r in H0; [exact H0|exact HS].
  - intros i Hi. unfold mean. rewrite (sum_ext G L (fun _ => l)) by exact HL.
    rewrite sum_const, (HL i Hi). field. apply QG_nonzero. exact HG.
Qed.

(** Unequal lengths: two responses, lengths [(1, 2)], rewards [(1, 0)]: [b = 1/3] and
    the advantages [(2/3, -1/3)] sum to [1/3], not [0]. *)
Theorem M4_opo_not_zero_sum :
  ~ sum 2 (opo_adv 2 (pair 1 2) (pair 1 0)) == 0.
Proof. vm_compute. discriminate. Qed.
